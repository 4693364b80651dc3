"""Passkey retrieval (LongRoPE / landmark-attention prompt): prompt builder, evaluation, objective.

A 5-digit key is hidden at a random depth in repeated filler; the model must say it after
"What is the pass key? The pass key is". Greedy decoding is checked by teacher forcing: one
forward over prompt + " <key>", and the trial counts as retrieved when the argmax at every answer
position is the answer's token — exactly "the greedy continuation starts with the key", at the
cost of one forward and with the same fast path as perplexity (no KV cache, chunk-free head on
a handful of positions). The key tokens' NLL from the same forward is the smooth variant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np
import optuna
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden
from longrope_opt.objectives._perplexity import _maybe_patch
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


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
    """

    ids: torch.Tensor
    answer_ids: torch.Tensor
    key: str
    depth: float
    key_span: tuple[int, int]
    text: str


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
    ids += [t for s in filler[before:] for t in s] + tail
    return PasskeyPrompt(
        ids=torch.tensor(ids, dtype=torch.long),
        answer_ids=torch.tensor(_encode(tokenizer, " " + key), dtype=torch.long),
        key=key,
        depth=float(depth),
        key_span=(start, end),
        text=tokenizer.decode(ids),
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

    Keys and depths come from ``numpy.random.default_rng([seed, length])``: every method sees the
    same prompts at a length, and a length's prompts do not depend on which other lengths run.

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
    rng = np.random.default_rng([seed, length])
    draws = [(int(rng.integers(10000, 100000)), float(rng.uniform())) for _ in range(n_trials)]
    prompts = [
        build_passkey_prompt(tokenizer, length, key=key, depth=depth)
        for key, depth in draws[start:]
    ]
    iterator: Any = prompts
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(prompts, desc=f"passkey {length}", leave=False, unit="key")
    result = PasskeyResult(accuracy=math.nan, key_nll=math.nan)
    with torch.inference_mode(), _maybe_patch(model, scaling):
        for prompt in iterator:
            correct, nll = passkey_trial(model, prompt)
            result.correct.append(correct)
            result.nll.append(nll)
            result.depths.append(prompt.depth)
    result.accuracy = sum(result.correct) / len(result.correct)
    tokens = sum(p.answer_ids.numel() for p in prompts)
    result.key_nll = sum(result.nll) / tokens
    return result


class PasskeyObjective:
    """Passkey retrieval as an Optuna objective (lower is better).

    Args:
        model: A loaded RoPE causal LM.
        samples: Unused text samples; their ``tokenizer`` attribute is used when `tokenizer` is
            not given (so the objective fits the ``factory(model, samples, space=...)`` protocol).
        space: The search space (target length = prompt length unless `lengths` is given).
        tokenizer: The model's tokenizer.
        lengths: Prompt lengths to average over; default ``[space.target_length]``.
        n_trials: Keys per length.
        metric: ``"accuracy"`` — returns the error rate 1 − accuracy; ``"nll"`` — the mean NLL of
            the key tokens (smooth, better for a search).
        seed: Chooses keys and depths (the same for every trial of a study).
        progress: Progress bars.
    """

    direction = "minimize"

    def __init__(
        self,
        model: Any,
        samples: Any = None,
        *,
        space: SearchSpace,
        tokenizer: Any = None,
        lengths: list[int] | None = None,
        n_trials: int = 10,
        metric: str = "nll",
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        if metric not in ("accuracy", "nll"):
            raise InvalidArgumentError(
                f"`metric` must be one of ['accuracy', 'nll'], got {metric!r}."
            )
        self.tokenizer = (
            tokenizer if tokenizer is not None else getattr(samples, "tokenizer", None)
        )
        if self.tokenizer is None:
            raise InvalidArgumentError(
                "`tokenizer` is required (or `samples` from `load_samples`, which carry it)."
            )
        self.model = model
        self.space = space
        self.lengths = list(lengths or [space.target_length])
        self.n_trials = n_trials
        self.metric = metric
        self.seed = seed
        self.progress = progress

    def __call__(self, trial: optuna.Trial) -> float:
        from longrope_opt.objectives._perplexity_objective import suggest_scaling

        scaling = suggest_scaling(trial, self.space)
        values, accuracies = [], []
        for step, length in enumerate(self.lengths):
            result = evaluate_passkey(
                self.model,
                self.tokenizer,
                scaling,
                length,
                n_trials=self.n_trials,
                seed=self.seed,
                progress=self.progress,
            )
            accuracies.append(result.accuracy)
            values.append(1.0 - result.accuracy if self.metric == "accuracy" else result.key_nll)
            trial.report(values[-1], step=step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after length {length}")
        trial.set_user_attr("passkey_accuracy", dict(zip(map(str, self.lengths), accuracies)))
        value = float(np.mean(values))
        return value if math.isfinite(value) else math.nan
