"""The figure of a validation (`longrope-opt validate --output`): perplexity ratio with its
interval per row, and passkey retrieval by depth, from `Summary.to_dict()` (plain data)."""

from __future__ import annotations

from typing import Any

from longrope_opt.viz._figures import _go


def validation_figure(summary: dict[str, Any], *, bins: int = 5) -> Any:
    """Left: each row's perplexity ratio to the length's reference with its 95 % interval (one
    marker per length). Right: the share of passkeys retrieved by key depth (`bins` bins).

    Args:
        summary: `longrope_opt.evaluation.Summary.to_dict()`.
        bins: Depth bins of the passkey panel.
    """
    go = _go()
    # the optional extras `plotly` and `optuna-dashboard`
    from plotly.subplots import make_subplots

    v, stats = summary["validation"], summary["stats"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], subplot_titles=(
        "perplexity / best classic (95 % bootstrap over documents)",
        "passkeys retrieved by depth of the key",
    ))  # fmt: skip
    for length in map(str, v["lengths"]):
        rows = v["rows"]
        ratio = [stats[length][r]["ratio"] for r in rows]
        lo = [(stats[length][r]["interval"] or [x, x])[0] for r, x in zip(rows, ratio)]
        hi = [(stats[length][r]["interval"] or [x, x])[1] for r, x in zip(rows, ratio)]
        fig.add_trace(go.Scatter(
            x=ratio, y=rows, mode="markers", name=f"ppl ratio at {length}",
            error_x={"type": "data", "symmetric": False,
                     "array": [h - x for h, x in zip(hi, ratio)],
                     "arrayminus": [x - low for low, x in zip(lo, ratio)]},
        ), row=1, col=1)  # fmt: skip
        depths = v["depths"][length]
        if not depths:
            continue
        edges = [i / bins for i in range(bins + 1)]
        centres = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
        for r in rows:
            got = v["passkey"][length][r]
            share = []
            for a, b in zip(edges, edges[1:]):
                inside = [g for g, d in zip(got, depths) if a <= d < b or (b == 1.0 and d == 1.0)]
                share.append(sum(inside) / len(inside) if inside else None)
            fig.add_trace(go.Scatter(x=centres, y=share, mode="lines+markers",
                                     name=f"{r} at {length}"), row=1, col=2)  # fmt: skip
    if not any(v["depths"][str(n)] for n in v["lengths"]):
        # say why the panel is empty rather than draw an empty frame
        fig.add_annotation(text="no passkeys measured here (keys = 0):<br>retrieval was not "
                           "compared", showarrow=False, xref="x2 domain", yref="y2 domain",
                           x=0.5, y=0.5, font={"size": 14})  # fmt: skip
    fig.add_vline(x=1.0, line_dash="dot", row=1, col=1)
    fig.update_xaxes(title_text="ratio (< 1: lower perplexity)", type="log", row=1, col=1)
    fig.update_xaxes(title_text="depth (0: start of the prompt)", row=1, col=2)
    fig.update_yaxes(title_text="retrieved", range=[-0.05, 1.05], row=1, col=2)
    fig.update_layout(template="plotly_white", height=max(420, 28 * len(v["rows"])),
                      title="validation: " + ", ".join(f"{n} tokens" for n in v["lengths"]))  # fmt: skip
    return fig
