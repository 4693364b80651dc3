"""Passkey: the paper's prompt (exact text, key placement, length control), evaluation, objective."""

from __future__ import annotations

import optuna
import pytest
import torch

from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import PasskeyObjective
from longrope_opt.objectives import build_passkey_prompt
from longrope_opt.objectives import evaluate_passkey
from longrope_opt.objectives._passkey import FILLER
from longrope_opt.objectives._passkey import INSTRUCTION
from longrope_opt.objectives._passkey import KEY_LINE
from longrope_opt.objectives._passkey import QUESTION
from longrope_opt.rope import yarn
from longrope_opt.space import SearchSpace
from tests.conftest import build_tiny_model


optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """SmolLM2's real BPE tokenizer (its text round-trips exactly)."""
    from transformers import AutoTokenizer

    from longrope_opt.models import resolve_smollm2

    return AutoTokenizer.from_pretrained(resolve_smollm2())


def _word_tokenizer():
    """A word-level tokenizer over the prompt's words, digits one by one (for tiny models)."""
    from tokenizers import Tokenizer
    from tokenizers import pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    text = " ".join([INSTRUCTION, *FILLER, KEY_LINE, QUESTION]).replace("{key}", "")
    words = sorted(set(text.replace(".", " . ").replace("?", " ? ").split()))
    vocab = {w: i for i, w in enumerate(["<unk>", *words, *map(str, range(10))])}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [0.0, 0.37, 1.0])
def test_prompt_text_is_the_papers(bpe_tokenizer, depth: float) -> None:
    p = build_passkey_prompt(bpe_tokenizer, 600, key=48213, depth=depth)
    key_line = KEY_LINE.format(key="48213")
    assert key_line == "The pass key is 48213. Remember it. 48213 is the pass key."
    assert p.text.count(key_line) == 1
    assert p.text.startswith(INSTRUCTION + " ")
    assert p.text.endswith(" " + QUESTION)
    # Without the key line, the middle is the 5 filler sentences repeated in order.
    middle = p.text.replace(" " + key_line, "")[len(INSTRUCTION) + 1 : -len(QUESTION) - 1]
    sentences = middle.split(". ")
    cycle = [s.rstrip(".") for s in FILLER]
    assert [s.rstrip(".") for s in sentences] == [cycle[i % 5] for i in range(len(sentences))]
    assert bpe_tokenizer.decode(p.ids[p.key_span[0] : p.key_span[1]]) == " " + key_line
    assert bpe_tokenizer.decode(p.answer_ids) == " 48213"


@pytest.mark.slow
def test_key_placement_follows_depth(bpe_tokenizer) -> None:
    n_head = len(bpe_tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"])
    n_tail = len(bpe_tokenizer(" " + QUESTION, add_special_tokens=False)["input_ids"])
    first = build_passkey_prompt(bpe_tokenizer, 2000, key=11111, depth=0.0)
    last = build_passkey_prompt(bpe_tokenizer, 2000, key=11111, depth=1.0)
    assert first.key_span[0] == n_head
    assert last.key_span[1] == last.ids.numel() - n_tail
    starts = [
        build_passkey_prompt(bpe_tokenizer, 2000, key=11111, depth=d / 10).key_span[0]
        for d in range(11)
    ]
    assert starts == sorted(starts) and len(set(starts)) == 11
    mid = build_passkey_prompt(bpe_tokenizer, 2000, key=11111, depth=0.5)
    assert abs(mid.key_span[0] / mid.ids.numel() - 0.5) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("length", [120, 1000, 4096, 16384])
def test_length_is_controlled_within_a_sentence(bpe_tokenizer, length: int) -> None:
    p = build_passkey_prompt(bpe_tokenizer, length, key=90000, depth=0.5)
    longest = max(
        len(bpe_tokenizer(" " + s, add_special_tokens=False)["input_ids"]) for s in FILLER
    )
    assert length - longest < p.ids.numel() <= length
    # Tokenizing the text again gives the same length (the pieces join without merges).
    assert (
        abs(len(bpe_tokenizer(p.text, add_special_tokens=False)["input_ids"]) - p.ids.numel()) <= 2
    )


def test_bad_prompt_arguments() -> None:
    tok = _word_tokenizer()
    with pytest.raises(InvalidArgumentError, match=r"`key` must be a 5-digit number, got '123'"):
        build_passkey_prompt(tok, 500, key=123, depth=0.5)
    with pytest.raises(InvalidArgumentError, match=r"`depth` must be in \[0, 1\], got 1.5"):
        build_passkey_prompt(tok, 500, key=12345, depth=1.5)
    with pytest.raises(InvalidArgumentError, match=r"`length` must be >= \d+ .*got 10"):
        build_passkey_prompt(tok, 10, key=12345, depth=0.5)
    with pytest.raises(InvalidArgumentError, match=r"`seed` must be an integer >= 0, got -4"):
        evaluate_passkey(build_tiny_model("llama"), tok, None, 160, n_trials=2, seed=-4)


def test_evaluate_passkey_on_a_tiny_model_is_seeded_and_consistent() -> None:
    tok = _word_tokenizer()
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    a = evaluate_passkey(model, tok, None, 160, n_trials=4, seed=3)
    b = evaluate_passkey(model, tok, yarn(spec, 160), 160, n_trials=4, seed=3)
    assert a.depths == b.depths  # same prompts for every method
    assert 0.0 <= a.accuracy <= 1.0 and len(a.correct) == 4
    assert a.accuracy == sum(a.correct) / 4
    assert a.nll != b.nll  # the scaling changes the model's answer distribution
    # The teacher-forced check agrees with real greedy decoding.
    prompt = build_passkey_prompt(tok, 160, key=52341, depth=0.3)
    with torch.no_grad():
        out = model.generate(
            prompt.ids[None], max_new_tokens=prompt.answer_ids.numel(), do_sample=False
        )
    greedy = out[0, prompt.ids.numel() :]
    from longrope_opt.objectives._passkey import passkey_trial

    with torch.inference_mode():
        correct, _ = passkey_trial(model, prompt)
    assert correct == bool(torch.equal(greedy, prompt.answer_ids))


def test_passkey_objective_in_a_study(tmp_path) -> None:
    tok = _word_tokenizer()
    model = build_tiny_model("llama")
    space = SearchSpace(RopeSpec.from_config(model.config), 160)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'pk.db'}")
    study.optimize(PasskeyObjective(model, space=space, tokenizer=tok, n_trials=2), n_trials=2)
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE and t.value > 0
        assert set(t.user_attrs["passkey_accuracy"]) == {"160"}
    with pytest.raises(InvalidArgumentError, match="`tokenizer` is required"):
        PasskeyObjective(model, space=space)
    with pytest.raises(InvalidArgumentError, match=r"`metric` must be one of"):
        PasskeyObjective(model, space=space, tokenizer=tok, metric="f1")


def test_evaluate_passkey_in_pieces_equals_one_call() -> None:
    tok = _word_tokenizer()
    model = build_tiny_model("llama")
    whole = evaluate_passkey(model, tok, None, 160, n_trials=5, seed=7)
    head = evaluate_passkey(model, tok, None, 160, n_trials=2, seed=7)
    tail = evaluate_passkey(model, tok, None, 160, n_trials=5, seed=7, start=2)
    assert head.depths + tail.depths == whole.depths
    assert head.correct + tail.correct == whole.correct
    assert head.nll + tail.nll == pytest.approx(whole.nll)
    with pytest.raises(InvalidArgumentError, match=r"`start` must be in \[0, n_trials=5\), got 5"):
        evaluate_passkey(model, tok, None, 160, n_trials=5, start=5)


@pytest.mark.parametrize(("family", "attn"), [
    *((f, a) for f in ("llama", "mistral", "qwen2", "phi3", "gemma3")
      for a in ("sdpa", "longrope_sdpa_fp32")),
    # Gemma 3's sliding layers (window 16 of 200 tokens) banded, as its compute path runs them
    ("gemma3", "longrope_banded"), ("gemma3", "longrope_banded_fp32"),
])  # fmt: skip
def test_shared_prefix_gives_what_one_forward_per_prompt_gives(family: str, attn: str) -> None:
    from longrope_opt import RopeScaling
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import apply_rope_scaling
    from longrope_opt.patching import attention_of
    from longrope_opt.patching import set_attention

    model = build_tiny_model(family, vocab_size=64)
    set_attention(model, attn)
    spec = RopeSpec.from_config(model.config)
    # n̂ > 0 and t != 1: the start tokens keep their angle, the rest are interpolated
    scaling = RopeScaling(yarn(spec, 256).factors, n_hat=4, attention_scale=1.1)
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=6, seed=3)
    assert len({p.key_span[0] for p in prompts}) > 1  # keys at several depths
    with torch.inference_mode(), apply_rope_scaling(model, scaling):
        whole = {i: r for i, *r in passkey_results(model, prompts, share_prefix=False)}
        shared = {i: r for i, *r in passkey_results(model, prompts, share_prefix=True)}
    assert attention_of(model) == attn  # restored
    assert sorted(shared) == list(range(len(prompts)))
    for i in whole:
        assert shared[i][0] == whole[i][0]
        assert shared[i][1] == pytest.approx(whole[i][1], rel=1e-4, abs=1e-4)


def test_shared_prefix_runs_deepest_key_first_and_refuses_other_devices() -> None:
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import set_attention
    from longrope_opt.patching import shared_prefix

    model = build_tiny_model("llama", vocab_size=64)  # eager attention: prompts run whole
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=5, seed=1)
    with torch.inference_mode():
        assert [i for i, *_ in passkey_results(model, prompts)] == list(range(5))
        set_attention(model, "sdpa")  # shared by default
        order = [i for i, *_ in passkey_results(model, prompts)]
    starts = [prompts[i].key_span[0] for i in order]
    assert starts == sorted(starts, reverse=True) and starts != [p.key_span[0] for p in prompts]
    set_attention(model, "eager")  # not SDPA: refused, nothing switched
    with pytest.raises(ValueError, match="SDPA"), shared_prefix(model):
        pass
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize(("family", "attn"), [
    ("llama", "sdpa"), ("qwen2", "sdpa"), ("gemma3", "sdpa"), ("gemma3", "longrope_banded"),
])  # fmt: skip
def test_a_branch_is_one_forward_with_its_mask(family: str, attn: str) -> None:
    # `SharedPrefix.branch` equals one forward over [haystack ‖ key ‖ lead-in ‖ question] in
    # which the haystack does not see the branch, the key sees the haystack before its depth,
    # and the rest sees the haystack but the lead-in's own captured copy (eager attention).
    # Sliding layers (Gemma 3, window 16) also see only keys within their window by position.
    from longrope_opt.patching import set_attention
    from longrope_opt.patching import shared_prefix

    model = build_tiny_model(family, vocab_size=64)
    torch.manual_seed(0)
    hay = torch.randint(3, 64, (90,))
    key, lead, question = torch.randint(3, 64, (6,)), hay[80:], torch.randint(3, 64, (5,))
    a, L, w = 30, 90, 10
    ids = torch.cat([hay, key, lead, question])
    n = ids.numel()
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:L, :L] = torch.ones(L, L, dtype=torch.bool).tril()
    mask[L:, L:] = torch.ones(n - L, n - L, dtype=torch.bool).tril()  # the branch, causally
    mask[L : L + 6, :a] = True  # the key: the haystack before its depth
    mask[L + 6 :, : L - w] = True  # lead-in and question: the haystack but the lead-in's copy
    positions = torch.cat([torch.arange(L), torch.arange(a, a + 6),
                           torch.arange(L + 6 - w, L + 6 - w + w + 5)])  # fmt: skip
    set_attention(model, "eager")

    def additive(allowed: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, 1, n, n).masked_fill(~allowed, float("-inf"))

    mask4: object = additive(mask)
    window = getattr(model.config, "sliding_window", None)
    if family == "gemma3":  # one mask per layer type: the sliding one by position
        near = (positions[:, None] - positions[None, :]).abs() < window
        mask4 = {"full_attention": mask4, "sliding_attention": additive(mask & near)}
    with torch.inference_mode():
        reference = model.get_decoder()(input_ids=ids[None], position_ids=positions[None],
                                        attention_mask=mask4).last_hidden_state[0, L:]  # fmt: skip
        set_attention(model, attn)
        with shared_prefix(model) as shared:
            shared.capture(hay)
            branch = shared.branch(a, torch.cat([key, lead, question]), wide_from=6,
                                   position=L + 6 - w, wide=(a, L - w))  # fmt: skip
    torch.testing.assert_close(branch, reference, atol=2e-5, rtol=0)


def test_the_branched_form_with_a_whole_lead_in_is_the_single_key_prompt() -> None:
    # A lead-in that spans all the filler after the key leaves nothing unseen: the branched
    # form is then exactly the single-key prompt (the haystack's copy after the key is unused).
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import set_attention

    model = build_tiny_model("llama", vocab_size=64)
    set_attention(model, "sdpa")
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=6, seed=3)
    with torch.inference_mode():
        single = {i: r for i, *r in passkey_results(model, prompts, form="single")}
        whole = {i: r for i, *r in passkey_results(model, prompts, form="branched", lead_in=10**6)}
        short = {i: r for i, *r in passkey_results(model, prompts, form="branched", lead_in=2)}
    assert sorted(whole) == sorted(short) == list(range(6))
    for i in single:
        assert whole[i][0] == single[i][0]
        assert whole[i][1] == pytest.approx(single[i][1], rel=1e-4, abs=1e-4)
    # a short lead-in leaves the filler between key and lead-in blind to the key: another number
    far = [i for i, p in enumerate(prompts) if p.question_start - p.key_span[1] > 2]
    assert any(short[i][1] != pytest.approx(single[i][1], rel=1e-4) for i in far)


def test_the_branched_form_is_refused_where_it_cannot_run_and_an_unknown_form_always() -> None:
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results

    model = build_tiny_model("llama", vocab_size=64)  # eager attention
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=2, seed=3)
    with pytest.raises(InvalidArgumentError, match="'branched' needs a CPU model with SDPA"):
        list(passkey_results(model, prompts, form="branched"))
    with pytest.raises(InvalidArgumentError, match=r"`passkey_form` must be one of \['single', 'branched'\], got 'multi'"):  # noqa: E501
        list(passkey_results(model, prompts, form="multi"))


def test_a_search_in_the_branched_form_where_it_cannot_run_is_refused_before_its_first_trial() -> None:
    from longrope_opt.objectives import RetrievalConstraint
    from longrope_opt.rope import RopeSpec
    from longrope_opt.space import SearchSpace

    model = build_tiny_model("llama", vocab_size=64)  # eager attention, as a GPU without SDPA
    space = SearchSpace(RopeSpec.from_config(model.config), 256)
    with pytest.raises(InvalidArgumentError, match="'branched' needs a CPU model with SDPA"):
        RetrievalConstraint(model, _word_tokenizer(), space=space, keys=2, length=200,
                            form="branched")  # fmt: skip
    RetrievalConstraint(model, _word_tokenizer(), space=space, keys=2, length=200)  # single: runs


def test_a_haystack_capture_counts_its_layers_and_its_branches_do_not(monkeypatch) -> None:
    # A 128k haystack is a document's forward (minutes on a CPU): it shows the same layer bar;
    # the branches, a few dozen tokens each, do not advance it.
    import tqdm.auto

    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.objectives import passkey_results
    from longrope_opt.patching import set_attention

    seen = []

    class Recording(tqdm.auto.tqdm):  # type: ignore[misc]
        def close(self) -> None:
            seen.append((self.desc, self.n, self.total))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    model = build_tiny_model("llama", vocab_size=64)
    set_attention(model, "sdpa")
    n_layers = len(model.get_decoder().layers)
    prompts = passkey_prompts(_word_tokenizer(), 200, n_trials=3, seed=3)
    with torch.inference_mode():
        for form in ("branched", "single"):
            seen.clear()
            assert len(list(passkey_results(model, prompts, form=form))) == 3
            assert seen and set(seen) == {("layers", n_layers, n_layers)}, (form, seen)
    assert all(not layer._forward_hooks for layer in model.get_decoder().layers)
