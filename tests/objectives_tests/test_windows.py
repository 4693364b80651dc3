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
