"""Needle-driven perplexity: prompts (exact length, answer-only labels, depths, boundaries,
determinism, the answer never cut), the skip variant's positions, and the objective."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import NeedlePerplexityObjective
from longrope_opt.objectives import build_needle_prompt
from longrope_opt.objectives import build_needle_skip_prompt
from longrope_opt.objectives import needle_nll
from longrope_opt.objectives import needle_prompts
from longrope_opt.objectives import sentence_starts
from longrope_opt.rope import RopeSpec
from longrope_opt.space import SearchSpace
from longrope_opt.studies import record
from tests.conftest import TINY_LENGTH
from tests.conftest import build_tiny_model


PROSE = (
    "The river ran low that summer, and the mill stood idle for weeks. Children waded where "
    "boats had been. Nobody in the village could remember a drier year!\n"
    "By August the well in the square was roped off. Was it the heat, or the new dam upstream? "
    "The council met twice and decided nothing. "
)


class SentenceWords:
    """A word-level stand-in tokenizer for the tiny model: every word is a token, and about
    one token in seven decodes as a sentence end."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + (sum(map(ord, w)) % 120) for w in text.split()]}

    def batch_decode(self, batch):
        return [". " if b[0] % 7 == 0 else " w" for b in batch]


TINY_SPEC = RopeSpec(head_dim=16, base=10000.0, original_length=TINY_LENGTH)


@pytest.fixture(scope="module")
def bpe_tokenizer():
    from transformers import AutoTokenizer

    from longrope_opt.models import resolve_smollm2

    return AutoTokenizer.from_pretrained(resolve_smollm2())


@pytest.fixture(scope="module")
def doc(bpe_tokenizer) -> list[int]:
    # prose made of other sentences than the built-in corpus (code): shuffled per repeat
    rng = np.random.default_rng(3)
    sentences = [s.strip() + " " for s in PROSE.replace("\n", "\n|").split("|")]
    text = "".join("".join(rng.permutation(sentences)) for _ in range(60))
    return bpe_tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("length", [700, 1000, 1537])
def test_full_prompt_has_the_exact_length_and_ends_with_the_answer(bpe_tokenizer, doc, length):
    p = build_needle_prompt(bpe_tokenizer, doc, length, number=4829137, depth=0.5)
    assert p.ids.numel() == length and p.positions is None
    a0, a1 = p.answer_span
    assert a1 == length  # the answer closes the window: nothing after it can cut it
    assert bpe_tokenizer.decode(p.ids[a0:a1]).strip() == "4829137"
    before = bpe_tokenizer.decode(p.ids[:a0])
    assert before.endswith("The special magic number is")
    n0, n1 = p.needle_span
    assert bpe_tokenizer.decode(p.ids[n0:n1]).strip() == "The special magic number is 4829137."
    assert before.count("4829137") == 1  # once, in the needle: the answer is not in the text


def test_needle_sits_at_a_sentence_start_near_its_depth(bpe_tokenizer, doc) -> None:
    length = 2000
    spots = []
    for depth in (0.0, 0.1, 0.35, 0.6, 0.85, 1.0):
        p = build_needle_prompt(bpe_tokenizer, doc, length, number=1234567, depth=depth)
        n0 = p.needle_span[0]
        previous = bpe_tokenizer.decode(p.ids[n0 - 1 : n0])
        assert "\n" in previous or previous.rstrip().endswith((".", "!", "?"))
        body = length - (p.needle_span[1] - n0) - (length - p.answer_span[0]) - (
            p.answer_span[1] - p.answer_span[0]
        )
        # nearest boundary: the prose has one every ≤ 25 tokens
        assert abs(n0 - depth * (body + p.answer_span[1] - p.answer_span[0])) < 40
        spots.append(n0)
    assert spots == sorted(spots) and len(set(spots)) == len(spots)


def test_sentence_starts_skip_dots_inside_code(bpe_tokenizer) -> None:
    ids = bpe_tokenizer("x = self.value. Then more.\ny = 2", add_special_tokens=False)["input_ids"]
    pieces = [bpe_tokenizer.decode([i]) for i in ids]
    starts = sentence_starts(bpe_tokenizer, ids)
    after = [pieces[j] for j in starts]
    assert "value" not in "".join(after)  # "self." is not a sentence end
    assert any(a.strip() == "Then" for a in after) and after[-1].strip() == "y"


def test_prompts_are_deterministic_by_seed_and_differ_between_seeds(bpe_tokenizer, doc) -> None:
    docs = [torch.tensor(doc[:3000]), torch.tensor(doc[500:3500])]
    a = needle_prompts(bpe_tokenizer, docs, 1500, seed=7)
    b = needle_prompts(bpe_tokenizer, docs, 1500, seed=7)
    c = needle_prompts(bpe_tokenizer, docs, 1500, seed=8)
    assert len(a) == 8  # 2 documents × 4 default depths
    assert all(torch.equal(x.ids, y.ids) for x, y in zip(a, b))
    assert [x.number for x in a] != [x.number for x in c]
    assert len({x.number for x in a}) == len(a)
    with pytest.raises(InvalidArgumentError, match=r"`seed` must be an integer >= 0, got -1"):
        needle_prompts(bpe_tokenizer, docs, 1500, seed=-1)


def test_a_short_document_or_window_is_refused_not_cut(bpe_tokenizer, doc) -> None:
    with pytest.raises(InvalidArgumentError, match="needs"):
        build_needle_prompt(bpe_tokenizer, doc[:100], 500, number=1234567, depth=0.5)
    with pytest.raises(InvalidArgumentError, match="`length` must be >="):
        build_needle_prompt(bpe_tokenizer, doc, 20, number=1234567, depth=0.5)
    with pytest.raises(InvalidArgumentError, match="7-digit"):
        build_needle_prompt(bpe_tokenizer, doc, 500, number=12, depth=0.5)
    with pytest.raises(InvalidArgumentError, match="depth"):
        build_needle_prompt(bpe_tokenizer, doc, 500, number=1234567, depth=1.5)


@pytest.mark.parametrize("depth", [0.05, 0.5, 0.95])
def test_skip_prompt_spans_the_window_with_the_needle_at_its_depth(bpe_tokenizer, doc, depth):
    length, tokens = 32768, 1024
    p = build_needle_skip_prompt(
        bpe_tokenizer, doc, length, tokens=tokens, number=7654321, depth=depth
    )
    assert p.ids.numel() == tokens and len(p.positions) == tokens
    assert p.positions[0] == 0 and p.positions[-1] == length - 1
    assert all(b > a for a, b in zip(p.positions, p.positions[1:]))  # strictly increasing
    a0, a1 = p.answer_span
    assert a1 == tokens and bpe_tokenizer.decode(p.ids[a0:a1]).strip() == "7654321"
    head = (tokens - (p.needle_span[1] - p.needle_span[0]) - (tokens - a0) - (a1 - a0)) // 4
    lowest = head + p.needle_span[0] - head  # the needle cannot sit before the first piece
    assert p.needle_position >= lowest
    if 0.1 < depth < 0.9:
        assert abs(p.needle_position - depth * length) <= 1
    assert bpe_tokenizer.decode(p.ids[p.needle_span[0] : p.needle_span[1]]).strip().startswith(
        "The special magic number is 7654321"
    )


def test_needle_nll_scores_the_answer_tokens_only() -> None:
    model = build_tiny_model("llama")

    class Words:  # a word-level stand-in: every word is its own token
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [3 + (hash(w) % 120) for w in text.split()]}

        def batch_decode(self, batch):
            return [" w" for _ in batch]

    doc = torch.randint(3, 128, (400,)).tolist()
    p = build_needle_prompt(Words(), doc, 200, number=1234567, depth=0.5)
    nll, _ = needle_nll(model, p)
    with torch.no_grad():
        logits = model(p.ids[None]).logits[0].float()  # (T, V)
    a0, a1 = p.answer_span
    expected = torch.nn.functional.cross_entropy(logits[a0 - 1 : a1 - 1], p.ids[a0:a1], reduction="sum")
    assert math.isclose(nll, float(expected), rel_tol=1e-4)
    # a change before the answer that the model attends to changes it; the scored tokens do not
    # include the question: a changed question token leaves the count of scored tokens alone
    assert a1 - a0 == len(Words()(" 1234567")["input_ids"])


def test_objective_reports_each_prompt_and_stores_what_it_scored(tmp_path) -> None:
    model = build_tiny_model("llama")

    space = SearchSpace(TINY_SPEC, 256, n_hat=(0,), shape="critical")
    docs = [torch.randint(3, 128, (256,)) for _ in range(2)]
    objective = NeedlePerplexityObjective(model, docs, space=space, tokenizer=SentenceWords())
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'n.db'}", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    study.optimize(objective, n_trials=3)
    assert record.read_objective_record(study)["prompts"] == 8
    for t in study.trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert sorted(t.intermediate_values) == list(range(8))
        assert len(t.user_attrs["needle_nll"]) == 8 and 0 <= t.user_attrs["needle_correct"] <= 8
        mean = sum(t.user_attrs["needle_nll"]) / 8  # same answer length in every prompt
        assert math.isclose(t.value, math.exp(mean), rel_tol=1e-4)
        # the cost `compare` reads: every prompt's forwarded tokens
        assert t.user_attrs["evaluated_tokens"] == sum(p.ids.numel() for p in objective.prompts)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"depths": (0.1, 0.5, 0.9)}, "`depths` must be at least 4"),
        ({"depths": (0.1, 0.5, 0.9, 1.2)}, "`depths` must be at least 4"),
        ({"mode": "half"}, "`mode` must be one of"),
        ({"mode": "skip", "skip_tokens": 10}, "`skip_tokens` must be an integer in"),
        ({"mode": "skip", "skip_tokens": 5000}, "`skip_tokens` must be an integer in"),
        ({"needles": 3}, "unknown needle-ppl option"),
    ],
)
def test_bad_options_fail_before_any_model(options, message) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        NeedlePerplexityObjective.validate(4096, **options)


def test_out_of_memory_fails_only_that_trial_and_undoes_the_patch(tmp_path, monkeypatch) -> None:
    from longrope_opt.objectives import _needle_objective

    model = build_tiny_model("llama")

    space = SearchSpace(TINY_SPEC, 256, n_hat=(0,))
    docs = [torch.randint(3, 128, (256,), generator=torch.Generator().manual_seed(0))]
    objective = NeedlePerplexityObjective(model, docs, space=space, tokenizer=SentenceWords())
    real = _needle_objective.needle_nll
    with torch.inference_mode():
        unpatched = real(model, objective.prompts[0])[0]
    calls = []

    def sometimes_oom(m, prompt):  # trial 1's second prompt runs out of memory
        calls.append(1)
        if len(calls) == 6:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real(m, prompt)

    monkeypatch.setattr(_needle_objective, "needle_nll", sometimes_oom)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'oom.db'}",
                                sampler=optuna.samplers.RandomSampler(seed=0))  # fmt: skip
    study.optimize(objective, n_trials=3)
    states = [t.state for t in study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                      optuna.trial.TrialState.COMPLETE]  # fmt: skip
    assert study.trials[1].user_attrs["failure"].startswith("out of memory: CUDA out of memory")
    # the failed trial's patch was undone: the model scores exactly as it did unpatched
    with torch.inference_mode():
        assert real(model, objective.prompts[0])[0] == unpatched
    assert study.trials[2].value != study.trials[0].value  # and later trials were really patched


HARD_WRAPPED = (
    "It was the best of times, it was the worst of times, it was the age of\n"
    "wisdom, it was the age of foolishness. There were a king with a large jaw\n"
    "and a queen with a plain face, on the throne of England. In both\n"
    "countries it was clearer than crystal to the lords of the State preserves\n"
    "that things in general were settled for ever. The year was one of\n"
    "those that pass quietly, and the roads were long and full of mud.\n"
)


@pytest.mark.parametrize("skip", [False, True])
def test_in_hard_wrapped_prose_the_needle_takes_a_sentence_end_and_never_runs_on(
    bpe_tokenizer, skip
) -> None:
    # Lines end mid-sentence: a line start is the nearest boundary for many depths, but the
    # needle goes after a full stop, and what follows it starts after white space.
    ids = bpe_tokenizer(HARD_WRAPPED * 40, add_special_tokens=False)["input_ids"]
    for depth in (0.1, 0.35, 0.6, 0.85):
        if skip:
            p = build_needle_skip_prompt(bpe_tokenizer, ids, 4096, tokens=700, number=7654321,
                                         depth=depth)  # fmt: skip
            assert p.ids.numel() == 700
        else:
            p = build_needle_prompt(bpe_tokenizer, ids, 1800, number=7654321, depth=depth)
            assert p.ids.numel() == 1800
        n0, n1 = p.needle_span
        before = bpe_tokenizer.decode(p.ids[n0 - 3 : n0]).rstrip()
        assert before.endswith("."), (depth, before)
        after = bpe_tokenizer.decode(p.ids[n1 : n1 + 1])
        assert after[:1].isspace(), (depth, after)


def test_a_study_refuses_trials_on_other_prompts(tmp_path) -> None:
    model = build_tiny_model("llama")

    space = SearchSpace(TINY_SPEC, 256, n_hat=(0,))
    docs = [torch.randint(3, 128, (256,), generator=torch.Generator().manual_seed(1))]
    storage = f"sqlite:///{tmp_path / 'p.db'}"
    study = optuna.create_study(storage=storage, study_name="s")
    study.optimize(NeedlePerplexityObjective(model, docs, space=space, tokenizer=SentenceWords()), n_trials=1)
    same = NeedlePerplexityObjective(model, docs, space=space, tokenizer=SentenceWords())
    study.optimize(same, n_trials=1)  # the same prompts: resumes
    other = NeedlePerplexityObjective(model, docs, space=space, tokenizer=SentenceWords(), seed=5)
    with pytest.raises(InvalidArgumentError, match="was scored on other needle prompts"):
        study.optimize(other, n_trials=1)
    assert [t.state for t in study.trials][:2] == [optuna.trial.TrialState.COMPLETE] * 2
