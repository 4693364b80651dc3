"""Window/stride bookkeeping: every token after the first is scored exactly once, in order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import sliding_windows
from longrope_opt.objectives import truncate_window


def _scored(windows) -> list[int]:
    return [t for w in windows for t in range(w.score_from, w.end)]


@given(n=st.integers(2, 3000), window=st.integers(2, 600), data=st.data())
def test_sliding_scores_every_token_once_in_order(n: int, window: int, data) -> None:
    stride = data.draw(st.integers(1, window - 1))
    windows = sliding_windows(n, window, stride)
    assert _scored(windows) == list(range(1, n))
    for w in windows:
        assert 0 <= w.begin < w.score_from <= w.end <= n
        assert w.end - w.begin <= window
        # every scored token after the first window has at least window - stride tokens of context
        if w.begin > 0:
            assert w.score_from - w.begin >= window - stride


def test_sliding_example() -> None:
    assert [tuple(w) for w in sliding_windows(10, 4, 2)] == [
        (0, 4, 1),
        (2, 6, 4),
        (4, 8, 6),
        (6, 10, 8),
    ]
    assert [tuple(w) for w in sliding_windows(9, 4, 3)] == [(0, 4, 1), (3, 7, 4), (5, 9, 7)]


def test_window_longer_than_document_is_one_window() -> None:
    assert sliding_windows(5, 100, 10) == truncate_window(5, 100)


def test_truncate_scores_first_length_tokens() -> None:
    (w,) = truncate_window(1000, 256)
    assert _scored([w]) == list(range(1, 256))


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        ((1, 4, 2), "`n_tokens` must be >= 2, got 1"),
        ((10, 1, 1), "`window` must be >= 2, got 1"),
        ((10, 4, 4), r"`stride` must be in \[1, window - 1 = 3\], got 4"),
        ((10, 4, 0), "got 0"),
    ],
)
def test_bad_arguments(args, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match=pattern):
        sliding_windows(*args)


@given(tokens=st.integers(4, 400), chunks=st.integers(2, 9), extra=st.integers(0, 5000))
def test_skip_positions_spread_pieces_over_the_window(
    tokens: int, chunks: int, extra: int
) -> None:
    from longrope_opt.objectives._windows import skip_positions
    from longrope_opt.objectives._windows import skip_window

    if tokens < 2 * chunks:
        with pytest.raises(InvalidArgumentError, match="`tokens` must be in"):
            skip_positions(tokens, tokens + extra, chunks)
        return
    length = tokens + extra
    pos = skip_positions(tokens, length, chunks)
    assert len(pos) == tokens
    assert pos[0] == 0 and pos[-1] == length - 1
    assert all(b > a for a, b in zip(pos, pos[1:]))  # strictly increasing: causal order kept
    jumps = [b - a for a, b in zip(pos, pos[1:]) if b - a > 1]
    assert len(jumps) <= chunks - 1
    if jumps:
        assert max(jumps) - min(jumps) <= 1  # equal gaps (up to rounding)
    w = skip_window(tokens + 3, tokens, chunks)
    assert (w.begin, w.end, w.score_from) == (0, tokens, tokens // chunks)


def test_skip_rejects_bad_sizes() -> None:
    from longrope_opt.objectives._windows import skip_positions
    from longrope_opt.objectives._windows import skip_window

    with pytest.raises(InvalidArgumentError, match=r"`chunks` must be >= 2, got 1\."):
        skip_positions(16, 64, 1)
    with pytest.raises(InvalidArgumentError, match=r"4, length = 8\], got 16"):
        skip_positions(16, 8, 2)
    with pytest.raises(InvalidArgumentError, match=r"n_tokens = 10\], got 16"):
        skip_window(10, 16, 2)
