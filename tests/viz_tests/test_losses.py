"""`loss_curve_figure`: each run's per-step loss and its running mean, paired by step."""

from __future__ import annotations

import pytest

from longrope_opt.viz import loss_curve_figure


def test_each_run_has_its_steps_and_a_running_mean() -> None:
    losses = {"finetuned": [3.0, 1.0, 2.0, 4.0], "finetuned-yarn-cd": [2.0, 2.0, 2.0, 2.0]}
    fig = loss_curve_figure(losses, smooth=2)
    by_name = {trace.name: trace for trace in fig.data}
    assert set(by_name) == {"finetuned (per step)", "finetuned (mean of 2)",
                            "finetuned-yarn-cd (per step)", "finetuned-yarn-cd (mean of 2)"}  # fmt: skip
    assert list(by_name["finetuned (per step)"].x) == [1, 2, 3, 4]
    # the mean of the last 2 steps (of 1 at the first)
    assert list(by_name["finetuned (mean of 2)"].y) == pytest.approx([3.0, 2.0, 1.5, 3.0])
    assert list(by_name["finetuned-yarn-cd (mean of 2)"].y) == pytest.approx([2.0] * 4)


def test_a_window_longer_than_the_run_averages_what_there_is() -> None:
    fig = loss_curve_figure({"short": [1.0, 3.0]}, smooth=8)
    mean = next(t for t in fig.data if t.name.startswith("short (mean"))
    assert mean.name == "short (mean of 2)" and list(mean.y) == pytest.approx([1.0, 2.0])
