"""Passkey retrieval (LongRoPE / landmark-attention prompt): prompt builder and evaluation.

A 5-digit key is hidden at a random depth in repeated filler; the model must say it after
"What is the pass key? The pass key is". Greedy decoding is checked by teacher forcing: one
forward over prompt + " <key>", and the trial counts as retrieved when the argmax at every answer
position is the answer's token — exactly "the greedy continuation starts with the key", at the
cost of one forward and with the same fast path as perplexity (no KV cache, chunk-free head on
a handful of positions). The key tokens' NLL from the same forward is the smooth variant.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden
from longrope_opt.objectives._forms import LEAD_IN
from longrope_opt.objectives._forms import check_passkey_form
from longrope_opt.objectives._perplexity import _maybe_patch
from longrope_opt.objectives._perplexity import layer_progress
from longrope_opt.patching import can_share_prefix
from longrope_opt.patching import resumable_forward
from longrope_opt.patching import shared_prefix
from longrope_opt.rope import RopeScaling


INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there."
)
FILLER = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key? The pass key is"


@dataclass
class PasskeyPrompt:
    """One passkey prompt, tokenized.

    Attributes:
        ids: Prompt tokens, 1-D ``long`` (ends with "... The pass key is").
        answer_ids: Tokens of ``" <key>"``, what a correct greedy continuation starts with.
        key: The 5-digit key.
        depth: Requested relative depth in [0, 1].
        key_span: ``[start, end)`` token positions of the key line inside `ids`.
        text: The prompt as text (the decoded `ids`).
        question_start: Where the question begins in `ids` (the filler ends there).
    """

    ids: torch.Tensor
    answer_ids: torch.Tensor
    key: str
    depth: float
    key_span: tuple[int, int]
    text: str
    question_start: int = -1

    def haystack(self) -> torch.Tensor:
        """The prompt without its key line and question: instruction and filler."""
        a, b = self.key_span
        return torch.cat([self.ids[:a], self.ids[b : self.question_start]])


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_passkey_prompt(
    tokenizer: Any, length: int, *, key: int | str, depth: float
) -> PasskeyPrompt:
    """The paper's passkey prompt with about `length` tokens (never more, short by < 1 sentence).

    Pieces are tokenized separately (each after a space) and concatenated, so the token count
    and the key's position are exact; filler is added sentence by sentence, so the prompt is at
    most one filler sentence (≈ 6 tokens) short of `length`.

    Args:
        tokenizer: A Hugging Face tokenizer.
        length: Prompt tokens wanted.
        key: The passkey (5 digits, e.g. 48213).
        depth: Where the key goes, 0 (right after the instruction) … 1 (right before the question).

    Returns:
        A `PasskeyPrompt`.
    """
    key = str(key)
    if not (key.isdigit() and len(key) == 5):
        raise InvalidArgumentError(f"`key` must be a 5-digit number, got {key!r}.")
    if not 0.0 <= depth <= 1.0:
        raise InvalidArgumentError(f"`depth` must be in [0, 1], got {depth!r}.")
    head = _encode(tokenizer, INSTRUCTION)
    key_ids = _encode(tokenizer, " " + KEY_LINE.format(key=key))
    tail = _encode(tokenizer, " " + QUESTION)
    sentences = [_encode(tokenizer, " " + s) for s in FILLER]
    budget = length - len(head) - len(key_ids) - len(tail)
    if budget < 0:
        raise InvalidArgumentError(
            f"`length` must be >= {length - budget} (instruction + key + question), got {length}."
        )
    filler: list[list[int]] = []
    used = 0
    while used + len(sentences[len(filler) % len(sentences)]) <= budget:
        filler.append(sentences[len(filler) % len(sentences)])
        used += len(filler[-1])
    before = round(depth * len(filler))
    ids = head + [t for s in filler[:before] for t in s]
    start = len(ids)
    ids += key_ids
    end = len(ids)
    ids += [t for s in filler[before:] for t in s]
    question = len(ids)
    ids += tail
    return PasskeyPrompt(
        ids=torch.tensor(ids, dtype=torch.long),
        answer_ids=torch.tensor(_encode(tokenizer, " " + key), dtype=torch.long),
        key=key,
        depth=float(depth),
        key_span=(start, end),
        text=tokenizer.decode(ids),
        question_start=question,
    )


@dataclass
class PasskeyResult:
    """Passkey retrieval at one length.

    Attributes:
        accuracy: Share of trials whose greedy answer starts with the key.
        key_nll: Mean NLL (nats) of the answer tokens.
        correct: Per trial.
        nll: Per trial (Σ over the answer tokens).
        depths: Per trial.
    """

    accuracy: float
    key_nll: float
    correct: list[bool] = field(default_factory=list)
    nll: list[float] = field(default_factory=list)
    depths: list[float] = field(default_factory=list)


def passkey_trial(model: Any, prompt: PasskeyPrompt) -> tuple[bool, float]:
    """(greedy answer starts with the key, Σ NLL of the answer tokens) for one prompt."""
    ids = torch.cat([prompt.ids, prompt.answer_ids])  # (T + A,)
    hidden = decoder_hidden(model, ids)  # (T + A, H)
    n, a = prompt.ids.numel(), prompt.answer_ids.numel()
    nll, correct = chunked_nll(model, hidden[n - 1 : n - 1 + a], prompt.answer_ids)
    return correct == a, float(nll)


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if differ.numel() else n



def passkey_results(
    model: Any, prompts: Sequence[PasskeyPrompt], *, share_prefix: bool | None = None,
    form: str = "single", lead_in: int = LEAD_IN,
) -> Iterator[tuple[int, bool, float]]:  # fmt: skip
    """``(index, correct, answer NLL)`` for each prompt, yielded as each is measured.

    ``form="single"`` measures each prompt as the paper's single-key prompt, exactly. Prompts
    of one length share their beginning (instruction and filler up to the key). On the CPU that
    beginning runs once and each prompt only from where it departs from it
    (`longrope_opt.patching.shared_prefix`): the same numbers as one forward per prompt, at
    ≈ 0.6 of the cost for keys at uniform depths. Prompts then run deepest key first; yielding
    each result lets a caller store it at once and stop early.

    ``form="branched"`` runs the haystack (instruction and filler, no key) once, then grafts
    each prompt's key line at its depth and its question at the end onto it
    (`longrope_opt.patching.SharedPrefix.branch`): the key sees the filler before it, the
    question sees all the filler and its own key, and the filler after the key does not see
    the key (the one difference from the single-key prompt; it is ≈ 20 positions early, too).
    Any number of keys then cost one forward and a few dozen tokens each: 20 keys at 64k cost
    one forward instead of ≈ 12. Agreement with the single form is measured in
    `docs/results.md` (CPU only: it needs `shared_prefix`).

    Args:
        model: A loaded causal LM (already patched with the scaling to measure).
        prompts: Passkey prompts.
        share_prefix: Share the beginning (default: for two or more prompts where
            `longrope_opt.patching.can_share_prefix`: the CPU with SDPA attention); single form.
        form: One of `PASSKEY_FORMS`.
        lead_in: Branched form: filler tokens before the question run with the key in view.

    Raises:
        InvalidArgumentError: An unknown form, or the branched form where `shared_prefix`
            cannot run.
    """
    check_passkey_form(form)
    if form == "branched":
        yield from _branched_results(model, prompts, lead_in)
        return
    if share_prefix is None:
        share_prefix = len(prompts) > 1 and can_share_prefix(model)
    if not share_prefix:
        for i, prompt in enumerate(prompts):
            yield (i, *passkey_trial(model, prompt))
        return
    order = sorted(range(len(prompts)), key=lambda i: (-prompts[i].key_span[0], i))
    base = prompts[order[0]].ids[: prompts[order[0]].key_span[0]]
    with shared_prefix(model) as shared, _kept(model, shared):
        # the capture stays saved until every continuation is measured: a stop among them
        # finds it whole (they run unwatched)
        with layer_progress(model, 1):  # a haystack is as long as a document's forward
            shared.capture(base)
        alone = []
        for i in order:
            prompt = prompts[i]
            ids = torch.cat([prompt.ids, prompt.answer_ids])  # (T + A,)
            # never past the last prompt token: its hidden state predicts the answer
            start = min(_common_prefix(ids, base), prompt.ids.numel() - 1)
            if start < 1:  # nothing shared: measured whole, after the shared ones
                alone.append(i)
                continue
            hidden = shared.continue_from(start, ids[start:])  # (T + A − start, H)
            n, a = prompt.ids.numel() - start, prompt.answer_ids.numel()
            nll, correct = chunked_nll(model, hidden[n - 1 : n - 1 + a], prompt.answer_ids)
            yield i, correct == a, float(nll)
    for i in alone:
        yield (i, *passkey_trial(model, prompts[i]))


def check_form_runs(model: Any, form: str) -> str:
    """`form` if it is a passkey form that runs on `model`: the branched form needs a shared
    prefix (`longrope_opt.patching.can_share_prefix`: a CPU model with SDPA attention). Callers
    check before their first forward, so that a GPU run is refused in one line, not after the
    perplexities it measured first.

    Raises:
        InvalidArgumentError: An unknown form, or the branched form where it cannot run.
    """
    check_passkey_form(form)
    if form == "branched" and not can_share_prefix(model):
        device = model.get_output_embeddings().weight.device
        raise InvalidArgumentError(
            "`passkey_form` 'branched' needs a CPU model with SDPA attention (a shared prefix), "
            f"got one on {device.type}: use 'single'."
        )
    return form


def _branched_results(
    model: Any, prompts: Sequence[PasskeyPrompt], lead_in: int
) -> Iterator[tuple[int, bool, float]]:
    check_form_runs(model, "branched")
    groups: dict[tuple[int, ...], list[int]] = {}  # prompts with the same haystack
    for i, prompt in enumerate(prompts):
        if prompt.question_start < 0:
            raise InvalidArgumentError(f"prompt {i} has no question_start (build_passkey_prompt sets it).")
        groups.setdefault(tuple(prompt.haystack().tolist()), []).append(i)
    with shared_prefix(model) as shared:
        for haystack, members in groups.items():
            # a 128k haystack is a 15-45 minute forward on a CPU and its branches as long again:
            # a stop in either resumes the capture from its saved layers (all of them, once done)
            with _kept(model, shared):
                with layer_progress(model, 1):  # the haystack's layers, as a document's
                    shared.capture(torch.tensor(haystack, dtype=torch.long))
                for i in members:
                    prompt = prompts[i]
                    a, b = prompt.key_span
                    q = prompt.question_start
                    lead = min(lead_in, q - b)  # filler that sees the key: the question's lead-in
                    ids = torch.cat([prompt.ids[a:b], prompt.ids[q - lead :], prompt.answer_ids])
                    end = q - (b - a)  # the haystack's length
                    # key line at its depth; lead-in and question where the single prompt has them
                    hidden = shared.branch(a, ids, wide_from=b - a, position=q - lead,
                                           wide=(a, end - lead))  # fmt: skip
                    n, k = prompt.ids.numel() - q + lead, prompt.answer_ids.numel()
                    last = (b - a) + n - 1  # the question's last token predicts the answer
                    nll, correct = chunked_nll(model, hidden[last : last + k], prompt.answer_ids)
                    yield i, correct == k, float(nll)


def _kept(model: Any, shared: Any) -> Any:
    # a model from `load_model` names where its long forwards are kept (`window_nll` too)
    return resumable_forward(model, getattr(model, "longrope_opt_forwards", None), layer_state=shared)


def passkey_prompts(
    tokenizer: Any, length: int, *, n_trials: int, seed: int = 0, start: int = 0
) -> list[PasskeyPrompt]:
    """Prompts ``start … n_trials − 1`` of `seed` at `length` (the same in every call).

    Keys and depths come from ``numpy.random.default_rng([seed, length])``: every method sees the
    same prompts at a length, and a length's prompts do not depend on which other lengths run.
    """
    rng = np.random.default_rng([seed, length])
    draws = [(int(rng.integers(10000, 100000)), float(rng.uniform())) for _ in range(n_trials)]
    return [
        build_passkey_prompt(tokenizer, length, key=key, depth=depth)
        for key, depth in draws[start:]
    ]


def evaluate_passkey(
    model: Any,
    tokenizer: Any,
    scaling: RopeScaling | None,
    length: int,
    *,
    n_trials: int = 10,
    seed: int = 0,
    start: int = 0,
    progress: bool = False,
) -> PasskeyResult:
    """Passkey accuracy of `model` with `scaling` at `length` tokens.

    Keys and depths come from ``numpy.random.default_rng([seed, length])`` (`passkey_prompts`):
    every method sees the same prompts at a length. On the CPU the prompts share one forward
    over their common beginning (`passkey_results`).

    Args:
        model: A loaded causal LM with RoPE.
        tokenizer: Its tokenizer.
        scaling: RoPE scaling to apply (None: the model as it is).
        length: Prompt tokens.
        n_trials: Prompts (keys) per length.
        seed: Chooses keys and depths.
        start: Run prompts ``start .. n_trials - 1`` only (the earlier ones are drawn, not run):
            prompt i is the same in every call, so a long evaluation can be done in pieces and
            resumed.
        progress: Show a progress bar.

    Returns:
        A `PasskeyResult`.
    """
    if n_trials < 1:
        raise InvalidArgumentError(f"`n_trials` must be >= 1, got {n_trials}.")
    if not 0 <= start < n_trials:
        raise InvalidArgumentError(f"`start` must be in [0, n_trials={n_trials}), got {start}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgumentError(f"`seed` must be an integer >= 0, got {seed!r}.")
    prompts = passkey_prompts(tokenizer, length, n_trials=n_trials, seed=seed, start=start)
    bar: Any = None
    if progress:

        bar = tqdm(total=len(prompts), desc=f"passkey {length}", leave=False, unit="key")
    found: dict[int, tuple[bool, float]] = {}
    with torch.inference_mode(), _maybe_patch(model, scaling):
        for i, correct, nll in passkey_results(model, prompts):
            found[i] = (correct, nll)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    result = PasskeyResult(accuracy=math.nan, key_nll=math.nan)
    for i, prompt in enumerate(prompts):
        result.correct.append(found[i][0])
        result.nll.append(found[i][1])
        result.depths.append(prompt.depth)
    result.accuracy = sum(result.correct) / len(result.correct)
    tokens = sum(p.answer_ids.numel() for p in prompts)
    result.key_nll = sum(result.nll) / tokens
    return result
