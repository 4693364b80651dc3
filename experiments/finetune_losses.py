"""The loss logs of the fine-tuning runs (`finetune_8x.sh`), finished or not, as small JSON files
to commit and a table of the same steps side by side.

Every run trains on the same items in the same order, so step k's loss is paired across runs:
the table compares runs over the steps all of them have done, PoSE samples (positions spread to
the target) apart from the short ones (inside the trained window, original RoPE).

    python experiments/finetune_losses.py experiments/runs/finetune-8x \
        --out experiments/results/finetune-8x    # also losses.html: the curves
        --svg docs/_static/finetune-8x-losses.svg  # the same as a static figure, for the docs
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from longrope_opt.training import PoseSamples
from longrope_opt.viz import loss_curve_figure


def read_log(run: Path) -> dict | None:
    """A run's per-step log: from its model directory once written, else its newest checkpoint."""
    config = run / "config.json"
    if config.is_file():
        meta = json.loads(config.read_text()).get("longrope_opt", {}).get("finetune", {})
        return {"finished": True, "history": [{"step": i + 1, "loss": x}
                                              for i, x in enumerate(meta.get("losses", []))]}
    folder = run.with_name(run.name + "-checkpoints")
    states = sorted(folder.glob("checkpoint-*/trainer_state.json"),
                    key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        return None
    state = json.loads(states[-1].read_text())
    history = [{k: h[k] for k in ("step", "loss", "grad_norm", "learning_rate") if k in h}
               for h in state["log_history"] if "loss" in h]
    return {"finished": False, "history": history}


def running_mean(xs: list[float], window: int) -> list[float]:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    return [float(np.mean(xs[max(0, i - window + 1): i + 1])) for i in range(len(xs))]


def loss_svg(logs: dict[str, dict], *, window: int, width: int = 720, height: int = 300) -> str:
    """Each run's per-step loss (faint) and its running mean, as a static SVG: GitHub and the
    docs show it where they do not run plotly's HTML. Only the PoSE steps: the short ones (a fifth,
    inside the trained window under the original RoPE) are another task, not the same curve."""
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    pose = {name: [(h["step"], h["loss"]) for h in log["history"] if not h["short"]]
            for name, log in logs.items()}
    steps = max(s for pts in pose.values() for s, _ in pts)
    ys = [y for pts in pose.values() for _, y in pts]
    lo, hi = np.floor(min(ys) * 2) / 2, np.ceil(max(ys) * 2) / 2
    left, right, top, bottom = 48, 170, 12, 34
    def x(s: float) -> float:
        return left + (width - left - right) * (s - 1) / max(1, steps - 1)
    def y(v: float) -> float:
        return top + (height - top - bottom) * (hi - v) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for v in np.arange(lo, hi + 1e-9, 0.5):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for s in range(0, steps + 1, 16):
        out.append(f'<text x="{x(max(s, 1)):.1f}" y="{height - bottom + 14}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">'
               f'optimizer step (PoSE steps; training loss, nats/token)</text>')
    for i, (name, pts) in enumerate(pose.items()):
        c = colors[i % len(colors)]
        mean = running_mean([v for _, v in pts], window)
        for values, extra in (([v for _, v in pts], 'stroke-opacity="0.25"'), (mean, 'stroke-width="2"')):
            path = " ".join(f"{x(s):.1f},{y(v):.1f}" for (s, _), v in zip(pts, values))
            out.append(f'<polyline fill="none" stroke="{c}" {extra} points="{path}"/>')
        out.append(f'<text x="{width - right + 8}" y="{top + 14 + 16 * i}" fill="{c}">{name}</text>')
    out.append(f'<text x="{width - right + 8}" y="{top + 14 + 16 * len(pose)}" fill="#555">'
               f'thick: mean of {window}</text>')
    return "\n".join(out + ["</svg>", ""])


def committed(out: Path | None) -> dict[str, dict]:
    """The logs written before into `out` (``NAME-losses.json``), by run name."""
    if out is None or not out.is_dir():
        return {}
    return {p.name.removesuffix("-losses.json"): json.loads(p.read_text())
            for p in sorted(out.glob("*-losses.json"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the folder finetune_8x.sh writes")
    parser.add_argument("--out", type=Path, default=None, help="write NAME-losses.json here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--short-share", type=float, default=0.2)
    parser.add_argument("--window", type=int, default=16, help="steps averaged at each end")
    parser.add_argument("--svg", type=Path, default=None, help="also draw the curves here")
    args = parser.parse_args()
    # the rule the runs drew their short items by (grad_accum 1: item k-1 is step k)
    rule = PoseSamples([], tokens=1, target=1, items=0, short_share=args.short_share, seed=args.seed)
    logs = {}
    # a run is its model directory once written, its checkpoint folder until then; a run not
    # here (an earlier sitting's, its folder gone) is its committed log, unless this one is longer
    names = sorted({p.name.removesuffix("-checkpoints") for p in args.runs.iterdir() if p.is_dir()}
                   | set(committed(args.out)))
    for run in (args.runs / name for name in names):
        log = read_log(run)
        kept = committed(args.out).get(run.name)
        if kept is not None and (log is None or len(kept["history"]) > len(log["history"])):
            log = kept
        elif kept is not None and log is not None:  # a finished run's record holds only losses:
            steps = {h["step"]: h for h in kept["history"]}  # keep the grad norms logged before
            log["history"] = [{**steps.get(h["step"], {}), **h} for h in log["history"]]
        if log is None or not log["history"]:
            continue
        for h in log["history"]:
            h["short"] = rule.is_short(h["step"] - 1)
        logs[run.name] = log
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{run.name}-losses.json").write_text(json.dumps(log, indent=1) + "\n")
    if args.out is not None and logs:  # the curves as `extend --finetune`'s report draws them
        curves = {name: [h["loss"] for h in log["history"]] for name, log in logs.items()}
        loss_curve_figure(curves).write_html(args.out / "losses.html", include_plotlyjs="cdn")
    if args.svg is not None and logs:
        args.svg.write_text(loss_svg(logs, window=args.window))
    if not logs:
        print("no run has logged a step yet")
        return
    common = min(len(log["history"]) for log in logs.values())
    w = min(args.window, common)
    print(f"{common} steps done by every run; mean loss (nats/token) of the first and last {w}")
    print(f"{'run':<18}{'steps':>6}  {'PoSE first':>10} {'PoSE last':>10}  {'short first':>11} {'short last':>10}")
    for name, log in logs.items():
        h = log["history"][:common]
        cells = []
        for short in (False, True):
            for part in (h[:w], h[common - w:]):
                xs = [x["loss"] for x in part if x["short"] == short]
                cells.append(f"{np.mean(xs):.4f}" if xs else "-")
        steps = f"{len(log['history'])}{'' if log['finished'] else '+'}"
        print(f"{name:<18}{steps:>6}  {cells[0]:>10} {cells[1]:>10}  {cells[2]:>11} {cells[3]:>10}")


if __name__ == "__main__":
    main()
