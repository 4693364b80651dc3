"""The loss curves of fine-tuning runs trained alike (`extend --finetune`, `finetune`)."""

from __future__ import annotations

from typing import Any

from longrope_opt.viz._figures import _go


def loss_curve_figure(losses: dict[str, list[float]], *, smooth: int = 8) -> Any:
    """Each run's per-step training loss (faint) and its running mean over `smooth` steps.

    Runs trained alike read the same samples at every step, so their curves are paired step by
    step: the gap between two curves is the difference the factors make on the same text.

    Args:
        losses: Per-step loss (nats/token) of each run, by name.
        smooth: Steps in the running mean.
    """
    go = _go()
    fig = go.Figure()
    for name, ys in losses.items():
        steps = list(range(1, len(ys) + 1))
        fig.add_trace(go.Scatter(x=steps, y=ys, mode="lines", name=f"{name} (per step)",
                                 opacity=0.35, legendgroup=name))  # fmt: skip
        window = max(1, min(smooth, len(ys)))
        mean = [sum(ys[max(0, i - window + 1): i + 1]) / len(ys[max(0, i - window + 1): i + 1])
                for i in range(len(ys))]  # fmt: skip
        fig.add_trace(go.Scatter(x=steps, y=mean, mode="lines", name=f"{name} (mean of {window})",
                                 legendgroup=name))  # fmt: skip
    fig.update_xaxes(title_text="optimizer step")
    fig.update_yaxes(title_text="training loss (nats/token)")
    fig.update_layout(template="plotly_white", height=420,
                      title="fine-tuning loss: the same samples in the same order")  # fmt: skip
    return fig
