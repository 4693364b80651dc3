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


#: Marker of each kind of trial in the progress figure.
_KINDS = {"seed": "star", "candidate": "circle", "model step": "diamond", "pruned": "x-thin"}


def progress_figure(records: dict[str, Any]) -> Any:
    """Every finished trial's value against its number, the best so far as a step line, seeds
    named, model steps and pruned trials marked; colour by generation where the sampler has
    several (`progress_records`)."""
    go = _go()
    trials = records["trials"]
    fig = go.Figure()
    for kind, symbol in _KINDS.items():
        mine = [r for r in trials if r["kind"] == kind and _finite(r["value"])]
        if not mine:
            continue
        marker: dict[str, Any] = {"symbol": symbol, "size": 12 if kind == "seed" else 8}
        if kind == "pruned":
            marker["color"] = "#999999"
        elif records["generations"] and kind != "seed":
            marker.update(color=[r["generation"] for r in mine], colorscale="Viridis",
                          showscale=True, colorbar={"title": "generation"})  # fmt: skip
        fig.add_trace(go.Scatter(
            x=[r["number"] for r in mine], y=[r["value"] for r in mine],
            mode="markers+text" if kind == "seed" else "markers", marker=marker,
            text=[_label(r) for r in mine] if kind == "seed" else None,
            textposition="top center", hovertext=[_hover(r) for r in mine], hoverinfo="text",
            name={"seed": "seeds", "pruned": "pruned (last report)"}.get(kind, kind + "s"),
        ))  # fmt: skip
    steps = [r for r in trials if _finite(r["best_so_far"])]
    fig.add_trace(go.Scatter(x=[r["number"] for r in steps], y=[r["best_so_far"] for r in steps],
                             mode="lines", line={"shape": "hv", "width": 2.5},
                             name="best so far"))  # fmt: skip
    fig.update_layout(
        title=f"Search progress: {len(trials)} finished trials, the best so far "
        f"({'highest' if records['maximize'] else 'lowest'} wins)",
        xaxis_title="trial", yaxis_title="objective (perplexity)", template="plotly_white",
    )  # fmt: skip
    _fit_range(fig, trials)
    return fig


def _label(r: dict[str, Any]) -> str:
    return str(r["seed"] or "")


def _hover(r: dict[str, Any]) -> str:
    parts = [f"trial {r['number']}", r["kind"] + (f" {r['seed']}" if r["seed"] else ""),
             f"value {r['value']:.4f}"]  # fmt: skip
    if r["kind"] == "pruned":
        parts.append(f"stopped after {r['reports']} report(s)")
    if r["generation"] is not None:
        parts.append(f"generation {r['generation']}")
    return "<br>".join(parts)


def _fit_range(fig: Any, trials: list[dict[str, Any]]) -> None:
    # One far-off trial (PI's seed at 4x, a diverged candidate) would flatten the rest into a
    # line: the range stops 5 robust deviations above the median value; points above are counted.
    values = sorted(r["value"] for r in trials if _finite(r["value"]))
    if not values:
        return
    median = values[len(values) // 2]
    spread = sorted(abs(v - median) for v in values)[len(values) // 2] * 1.4826
    lo, hi = values[0], min(values[-1], median + 5 * spread)
    pad = max(hi - lo, 0.01 * abs(lo)) * 0.15
    top = hi + pad
    fig.update_yaxes(range=[lo - pad, top])
    above = sum(v > top for v in values)
    if above:
        fig.add_annotation(
            text=f"{above} trial(s) above the range (zoom out to see)",
            xref="paper", yref="paper", x=1, y=1, showarrow=False, xanchor="right",
        )  # fmt: skip


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
