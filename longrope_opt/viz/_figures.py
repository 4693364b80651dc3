"""Plotly figures built from the plain records of `longrope_opt.viz._records`."""

from __future__ import annotations

import math
from typing import Any


def _go() -> Any:
    try:
        import plotly.graph_objects as go  # a dependency; imported late to keep start-up fast
    except ImportError:
        raise ImportError("figures need plotly: pip install plotly.") from None
    return go


def lambda_curve_figure(records: dict) -> Any:
    """λ_i against RoPE dimension pair i: the study's seeds, its best trial and the winner it
    ships (drawn bold; `lambda_records`), log y."""
    go = _go()
    fig = go.Figure()
    shipped = records.get("shipped")
    for name, values in records["curves"].items():
        best = name == shipped or (shipped is None and name.startswith("best"))
        fig.add_trace(
            go.Scatter(
                x=list(range(len(values))),
                y=values,
                mode="lines+markers" if best else "lines",
                name=name,
                line={"width": 3 if best else 1.5, "dash": "solid" if best else "dot"},
            )
        )
    target = records.get("target_length")
    native = records.get("native")
    # λ act on top of the checkpoint's own RoPE: say which, so a flat λ = 1 reads as "as loaded"
    on_top = f", on top of the checkpoint's own {native} RoPE" if native else ""
    fig.update_layout(
        title=f"RoPE rescale factors λ per dimension{f' (target {target})' if target else ''}"
        + on_top,
        xaxis_title="dimension pair i (high → low frequency)",
        yaxis_title=f"λ_i (angle n·θ_i / (ν_i·λ_i), ν: {native})" if native
        else "λ_i (angle n·θ_i / λ_i)",
        yaxis_type="log",
        template="plotly_white",
    )
    return fig


def generation_figure(records: list[dict[str, Any]]) -> Any:
    """Best perplexity in each generation and best so far."""
    go = _go()
    gens = [r["generation"] for r in records]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=gens,
            y=[r["best"] for r in records],
            mode="markers",
            name="best in generation",
            text=[f"{r['completed']}/{r['trials']} completed" for r in records],
        )
    )
    fig.add_trace(
        go.Scatter(x=gens, y=[r["best_so_far"] for r in records], mode="lines", name="best so far")
    )
    fig.update_layout(
        title="Best perplexity per generation",
        xaxis_title="generation",
        yaxis_title="perplexity",
        template="plotly_white",
    )
    # The y range follows the best-so-far line: one far-off generation (a poor seed, a diverged
    # mutant) would otherwise flatten everything else into a line. Points above are counted.
    best = [r["best_so_far"] for r in records if _finite(r["best_so_far"])]
    if best:
        lo, hi = min(best), max(best)
        pad = max(hi - lo, 0.01 * abs(lo)) * 0.15
        top = hi + pad
        fig.update_yaxes(range=[lo - pad, top])
        above = sum(_finite(r["best"]) and r["best"] > top for r in records)
        if above:
            fig.add_annotation(
                text=f"{above} generation best(s) above the range (zoom out to see)",
                xref="paper", yref="paper", x=1, y=1, showarrow=False, xanchor="right",
            )  # fmt: skip
    return fig


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == value and abs(value) != float("inf")


def length_figure(records: list[dict[str, Any]], *, title: str | None = None) -> Any:
    """Perplexity against context length, one line per method (log y; inf/NaN left out)."""
    go = _go()
    fig = go.Figure()
    methods: list[str] = []
    for r in records:
        if r["method"] not in methods:
            methods.append(r["method"])
    for method in methods:
        pts = [
            (r["length"], r["ppl"])
            for r in records
            if r["method"] == method and math.isfinite(r["ppl"])
        ]
        pts.sort()
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=method
            )
        )
    fig.update_layout(
        title=title or "Perplexity against context length",
        xaxis_title="context length (tokens)",
        yaxis_title="perplexity",
        yaxis_type="log",
        xaxis_type="log",
        template="plotly_white",
    )
    return fig
