"""Where a study's candidates differ: each complete trial's λ per frequency band, beside its value.

A band is the rotary dimensions whose frequency turns a given number of times inside the trained
window (the critical dimension is where that falls below one). Each cell is the band's mean
exponent k in λ = s^k: 0 leaves the band as trained, 1 interpolates it by the whole ratio s (PI),
above 1 compresses it further (NTK-cd's slowest dims). The value is the study's objective (the
perplexity on its own documents), so the table shows which band the search moved and what that
bought, before any held-out forward is spent.

    python experiments/factor_bands.py --model gemma3-270m \\
        --storage sqlite:///experiments/results/extend-gemma3-128k.db \\
        --study-name extend-gemma3-270m-131072
"""

from __future__ import annotations

import argparse
import math

import numpy as np


#: Band edges in turns inside the trained window, fastest band first.
TURNS = (1000.0, 100.0, 10.0, 1.0, 0.1)


def bands(turns: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(label, dims) per band of `turns` (turns of each dim in the trained window), fastest
    first; empty bands are left out."""
    edges = [math.inf, *TURNS, 0.0]
    out = []
    for hi, lo in zip(edges, edges[1:]):
        dims = np.flatnonzero((turns < hi) & (turns >= lo))
        if dims.size:
            label = f">={lo:g}" if hi == math.inf else f"<{hi:g}" if lo == 0 else f"{lo:g}-{hi:g}"
            out.append((f"{label} ({dims[0]}-{dims[-1]})", dims))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))  # fmt: skip
    p.add_argument("--storage", required=True)
    p.add_argument("--study-name", required=True)
    args = p.parse_args()
    import optuna

    from longrope_opt import record
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import space_of_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_named_study(make_storage(args.storage), args.study_name)
    spec = record.read_spec(study)
    length = int(record.target_length(study) or 0)
    s = spec.scale(length)
    turns = spec.original_length * spec.inv_freq() / (2 * math.pi)
    groups = bands(turns)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    print(f"{args.study_name}: s = {s:g} ({length} over {spec.original_length}); "
          f"{len(done)} complete trials; cells: mean k of λ = s^k per band (turns in "
          f"{spec.original_length} tokens, dims)")  # fmt: skip
    print(f"{'trial':>5} {'seed':8} {'value':>8}  " + "  ".join(f"{g:>15}" for g, _ in groups))
    for t in sorted(done, key=lambda t: t.value):
        scaling = space_of_study(study, t).to_scaling(t.params)
        k = np.log(np.asarray(scaling.factors)) / math.log(s)
        seed = str(t.user_attrs.get("seed", ""))
        cells = "  ".join(f"{k[d].mean():>+15.2f}" for _, d in groups)
        print(f"{t.number:>5} {seed:8} {t.value:>8.4f}  {cells}")


if __name__ == "__main__":
    main()
