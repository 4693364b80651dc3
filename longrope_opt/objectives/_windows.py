"""Window/stride bookkeeping for perplexity, as pure functions (no model, no torch).

A window is ``(begin, end, score_from)``: feed tokens ``[begin, end)`` and score the predictions of
tokens ``[score_from, end)`` (each predicted from everything before it inside the window). Over a
document, the scored ranges tile ``[1, n)`` exactly once, in order: token 0 has no context and is
never scored, as in transformers' ``model(ids, labels=ids)``.
"""

from __future__ import annotations

from typing import NamedTuple

from longrope_opt.errors import InvalidArgumentError


class Window(NamedTuple):
    """Feed ``[begin, end)``; score the tokens ``[score_from, end)``."""

    begin: int
    end: int
    score_from: int


def truncate_window(n_tokens: int, length: int) -> list[Window]:
    """One window over the first `length` tokens (the search's mode; paper: ``truncate``)."""
    if n_tokens < 2:
        raise InvalidArgumentError(f"`n_tokens` must be >= 2, got {n_tokens}.")
    end = min(n_tokens, length)
    return [Window(0, end, 1)]


def sliding_windows(n_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows of `window` tokens every `stride` tokens; each new window scores only new tokens.

    The first window scores tokens ``[1, window)``; each following one ends `stride` tokens later
    (the last is clipped to the document) and scores only the tokens not yet scored, each with at
    least ``window − stride`` tokens of context (YaRN / LongRoPE ``compute_perplexity``, stride 256).

    Args:
        n_tokens: Document length.
        window: Context length evaluated (L').
        stride: Tokens between window ends, ``1 <= stride < window`` (a token must have context).

    Returns:
        The windows, in order.
    """
    if n_tokens < 2:
        raise InvalidArgumentError(f"`n_tokens` must be >= 2, got {n_tokens}.")
    if window < 2:
        raise InvalidArgumentError(f"`window` must be >= 2, got {window}.")
    if not 1 <= stride <= window - 1:
        raise InvalidArgumentError(
            f"`stride` must be in [1, window - 1 = {window - 1}], got {stride}."
        )
    windows = [Window(0, min(window, n_tokens), 1)]
    scored = windows[0].end
    while scored < n_tokens:
        end = min(scored + stride, n_tokens)
        windows.append(Window(max(0, end - window), end, scored))
        scored = end
    return windows


def _check_skip(tokens: int, chunks: int, limit: int, limit_name: str) -> None:
    if chunks < 2:
        raise InvalidArgumentError(f"`chunks` must be >= 2, got {chunks}.")
    if not 2 * chunks <= tokens <= limit:
        raise InvalidArgumentError(
            f"`tokens` must be in [2 * chunks = {2 * chunks}, {limit_name} = {limit}], got {tokens}."
        )


def skip_window(n_tokens: int, tokens: int, chunks: int = 2) -> Window:
    """The window of the ``"skip"`` mode: feed the first `tokens` tokens, score all but chunk 0.

    Used with `skip_positions`, which spreads the `chunks` consecutive pieces of the text over
    the whole target window: the scored tokens see the far positions and the long distances of
    the target length at the cost of `tokens` tokens (positional skip-wise windows, Zhu et al.,
    "PoSE", ICLR 2024, used here for evaluation).
    """
    _check_skip(tokens, chunks, n_tokens, "n_tokens")
    return Window(0, tokens, tokens // chunks)


def skip_positions(tokens: int, length: int, chunks: int = 2) -> list[int]:
    """Position ids of the ``"skip"`` mode.

    The text is cut into `chunks` consecutive pieces of ``tokens // chunks`` tokens (the last takes
    the rest); piece j starts at ``j · (length − last) // (chunks − 1)``, so piece 0 starts at 0,
    the last ends at `length`, and the gaps between pieces are equal.
    """
    _check_skip(tokens, chunks, length, "length")
    size = tokens // chunks
    last = tokens - size * (chunks - 1)
    positions: list[int] = []
    for j in range(chunks):
        start = j * (length - last) // (chunks - 1)
        positions.extend(range(start, start + (last if j == chunks - 1 else size)))
    return positions
