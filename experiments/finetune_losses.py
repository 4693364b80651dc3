"""The loss logs of the fine-tuning runs (`finetune_8x.sh`), finished or not, as small JSON files
to commit and a table of the same steps side by side.

Every run trains on the same items in the same order, so step k's loss is paired across runs:
the table compares runs over the steps all of them have done, PoSE samples (positions spread to
the target) apart from the short ones (inside the trained window, original RoPE).

    python experiments/finetune_losses.py experiments/runs/finetune-8x \
        --out experiments/results/finetune-8x    # also losses.html: the curves
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
