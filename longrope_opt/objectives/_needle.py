"""Needle-driven perplexity (LongRoPE2, Shang et al. 2025, §3.1): prompts and their evaluation.

A real long document with one needle sentence ("The special magic number is 4829137.") at a
given depth, snapped to a sentence end within 2 % of it (else the nearest line start, for code
and hard-wrapped text, with a line break after the needle so it never runs into the next word),
then a question at the end; only the answer's tokens are scored. Plain perplexity is dominated
by local context, which any scaling that keeps the short-range frequencies gets right; the
answer can only be predicted by attending back to the needle, which is what an extension has
to preserve.

Prompts are built to their exact length from the pieces' tokens (never truncated afterwards, so
the answer cannot be cut off — the stored LongRoPE2 code truncates to L − 1 and can lose it).
The ``"skip"`` variant feeds a few thousand real tokens in three pieces whose position ids span
the whole target window (PoSE-style): the start of the document at positions 0…, the needle's
neighbourhood at the needle's depth, and the question at the end of the window.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden


NEEDLE = "The special magic number is {number}."
QUESTION = "What is the special magic number mentioned in the text above? The special magic number is"
#: Four depths spread over the window (the needle lands at the nearest sentence boundary).
DEFAULT_DEPTHS = (0.1, 0.35, 0.6, 0.85)
_ENDS = (".", "!", "?")


@dataclass
class NeedlePrompt:
    """One needle prompt, tokenized, answer included.

    Attributes:
        ids: Every token fed, 1-D ``long``: text with the needle, the question, the answer.
        positions: Position ids of `ids` (skip variant), or None for ``0 … len − 1``.
        answer_span: ``[start, end)`` of the answer tokens in `ids` (the only scored tokens).
        needle_span: ``[start, end)`` of the needle sentence in `ids`.
        number: The magic number (7 digits).
        depth: Requested depth in [0, 1].
        length: The target window the prompt spans (its last position + 1).
    """

    ids: torch.Tensor
    positions: list[int] | None
    answer_span: tuple[int, int]
    needle_span: tuple[int, int]
    number: str
    depth: float
    length: int

    @property
    def needle_position(self) -> int:
        """Position id of the needle's first token."""
        start = self.needle_span[0]
        return start if self.positions is None else self.positions[start]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def sentence_starts(tokenizer: Any, ids: Sequence[int]) -> np.ndarray:
    """Indices j where a line or sentence starts: token j − 1 holds a newline, or ends with
    ``. ! ?`` and token j starts with white space (so ``self.x`` in code is no boundary).
    Sorted; may be empty."""
    return _starts(tokenizer.batch_decode([[int(i)] for i in ids]))[0]


def _starts(pieces: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    # (every line or sentence start, the sentence starts among them): in hard-wrapped prose a
    # line start is usually mid-sentence, so the needle prefers a sentence end when one is near.
    every, sentence = [], []
    for j in range(1, len(pieces)):
        prev = pieces[j - 1]
        ends = prev.endswith(_ENDS) and pieces[j][:1].isspace()
        line = "\n" in prev
        if ends or line:
            every.append(j)
        before = prev.split("\n")[0].rstrip() or (pieces[j - 2].rstrip() if j >= 2 else "")
        if ends or (line and (prev.count("\n") >= 2 or before.endswith(_ENDS))):
            sentence.append(j)
    return np.asarray(every, dtype=np.int64), np.asarray(sentence, dtype=np.int64)


def _boundary(tokenizer: Any, ids: Sequence[int], target: int, low: int, high: int) -> int:
    # The sentence start nearest `target` within 2 % of the text (≥ 32 tokens), else the nearest
    # line or sentence start in [low, high], else `target` itself (clipped).
    every, sentence = _starts(tokenizer.batch_decode([[int(i)] for i in ids]))
    near = max(32, len(ids) // 50)
    close = sentence[(sentence >= max(low, target - near)) & (sentence <= min(high, target + near))]
    if close.size:
        return int(close[np.argmin(np.abs(close - target))])
    return _snap(every, target, low, high)


def _snap(starts: np.ndarray, target: int, low: int, high: int) -> int:
    # The start nearest `target` inside [low, high]; `target` itself when none is.
    inside = starts[(starts >= low) & (starts <= high)]
    if inside.size == 0:
        return int(min(max(target, low), high))
    return int(inside[np.argmin(np.abs(inside - target))])


def _pieces(tokenizer: Any, number: str) -> tuple[list[int], list[int], list[int]]:
    needle = _encode(tokenizer, " " + NEEDLE.format(number=number))
    question = _encode(tokenizer, "\n" + QUESTION)
    answer = _encode(tokenizer, " " + number)
    return needle, question, answer


def _separator(tokenizer: Any, following: int) -> list[int]:
    # [] when the token after the needle starts with white space; else one line-break token.
    if tokenizer.batch_decode([[int(following)]])[0][:1].isspace():
        return []
    newline = _encode(tokenizer, "\n")
    return newline[:1]


def _check(number: str, depth: float) -> None:
    if not (number.isdigit() and len(number) == 7):
        raise InvalidArgumentError(f"`number` must be a 7-digit number, got {number!r}.")
    if not 0.0 <= depth <= 1.0:
        raise InvalidArgumentError(f"`depth` must be in [0, 1], got {depth!r}.")


def build_needle_prompt(
    tokenizer: Any, doc: Sequence[int], length: int, *, number: int | str, depth: float
) -> NeedlePrompt:
    """A full-length needle prompt of exactly `length` tokens from the document `doc`.

    The document's first tokens fill the window; the needle goes at the sentence start nearest
    ``depth`` of the text; the question and the answer close the window.
    """
    number = str(number)
    _check(number, depth)
    needle, question, answer = _pieces(tokenizer, number)
    body = length - len(needle) - len(question) - len(answer) - 1  # - 1: see below
    if body < 1:
        raise InvalidArgumentError(
            f"`length` must be >= {length - body + 1} (needle + question + answer), got {length}."
        )
    if len(doc) < body + 1:
        raise InvalidArgumentError(
            f"the document has {len(doc)} tokens; a {length}-token needle prompt needs {body + 1}."
        )
    # One token of the document is held back: it is spent on a line break after the needle
    # when the text it precedes does not start with white space (a hard-wrapped line), so the
    # needle never runs into the next word; otherwise the document keeps it.
    text = [int(t) for t in doc[: body + 1]]
    at = _boundary(tokenizer, text[:body], round(depth * body), 1, body)
    after = _separator(tokenizer, text[at])
    kept = text[: body + 1 - len(after)]
    ids = kept[:at] + needle + after + kept[at:] + question + answer
    end = len(ids)
    return NeedlePrompt(
        ids=torch.tensor(ids, dtype=torch.long),
        positions=None,
        answer_span=(end - len(answer), end),
        needle_span=(at, at + len(needle)),
        number=number,
        depth=float(depth),
        length=int(length),
    )


def build_needle_skip_prompt(
    tokenizer: Any,
    doc: Sequence[int],
    length: int,
    *,
    tokens: int,
    number: int | str,
    depth: float,
) -> NeedlePrompt:
    """A `tokens`-token needle prompt whose position ids span a `length`-token window.

    Three pieces of consecutive document text: the first quarter of the text at positions
    0…, the middle half with the needle at its sentence start nearest the centre, placed so the
    needle sits at position ≈ depth · length, and the last quarter followed by the question and
    the answer, ending at position `length` − 1.
    """
    number = str(number)
    _check(number, depth)
    needle, question, answer = _pieces(tokenizer, number)
    q = len(question) + len(answer)
    text_len = tokens - len(needle) - q
    if text_len < 8:
        raise InvalidArgumentError(
            f"`skip_tokens` must be >= {tokens - text_len + 8} for a needle prompt, got {tokens}."
        )
    if tokens > length:
        raise InvalidArgumentError(f"`skip_tokens` must be <= {length}, got {tokens}.")
    if len(doc) < text_len:
        raise InvalidArgumentError(
            f"the document has {len(doc)} tokens; this needle prompt needs {text_len}."
        )
    text = [int(t) for t in doc[:text_len]]
    head, tail = text_len // 4, text_len // 4
    middle = text[head : text_len - tail]
    at = _boundary(tokenizer, middle, len(middle) // 2, 1, len(middle) - 1)
    after = _separator(tokenizer, middle[at])
    mid = middle[:at] + needle + after + middle[at + len(after) :]  # same count: see above
    last = text[text_len - tail :] + question + answer
    # Piece 2 is placed so the needle lands at depth · length, inside the gaps the pieces allow.
    lo, hi = head, length - len(last) - len(mid)
    start = int(min(max(round(depth * length) - at, lo), hi))
    positions = [*range(head), *range(start, start + len(mid))]
    positions += range(length - len(last), length)
    ids = text[:head] + mid + last
    return NeedlePrompt(
        ids=torch.tensor(ids, dtype=torch.long),
        positions=positions,
        answer_span=(len(ids) - len(answer), len(ids)),
        needle_span=(head + at, head + at + len(needle)),
        number=number,
        depth=float(depth),
        length=int(length),
    )


def needle_prompts(
    tokenizer: Any,
    docs: Sequence[torch.Tensor],
    length: int,
    *,
    depths: Sequence[float] = DEFAULT_DEPTHS,
    skip_tokens: int | None = None,
    seed: int = 0,
) -> list[NeedlePrompt]:
    """One prompt per (document, depth), numbers from ``default_rng([seed, length])``: every
    trial of a study sees the same prompts (paired values for `WilcoxonPruner`)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgumentError(f"`seed` must be an integer >= 0, got {seed!r}.")
    rng = np.random.default_rng([seed, length])
    prompts = []
    for doc in docs:
        ids = doc.tolist()
        for depth in depths:
            number = int(rng.integers(1_000_000, 10_000_000))
            if skip_tokens is None:
                prompts.append(build_needle_prompt(tokenizer, ids, length, number=number, depth=depth))
            else:
                prompts.append(
                    build_needle_skip_prompt(
                        tokenizer, ids, length, tokens=skip_tokens, number=number, depth=depth
                    )
                )
    return prompts


def needle_nll(model: Any, prompt: NeedlePrompt) -> tuple[float, bool]:
    """(Σ NLL of the answer tokens, greedy answer exact) for one prompt, one forward."""
    with torch.inference_mode():
        hidden = decoder_hidden(model, prompt.ids, prompt.positions)  # (T, H)
        a0, a1 = prompt.answer_span
        targets = prompt.ids[a0:a1]  # (A,)
        nll, correct = chunked_nll(model, hidden[a0 - 1 : a1 - 1], targets)
    return float(nll), int(correct) == a1 - a0


def prompts_hash(prompts: Sequence[NeedlePrompt]) -> str:
    """sha256 prefix over the prompts' tokens and positions (provenance)."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(p.ids.numpy().tobytes())
        h.update(np.asarray(p.positions or [], dtype=np.int64).tobytes())
    return h.hexdigest()[:16]
