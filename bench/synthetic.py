"""Is the evolution a good optimizer? Every sampler on a synthetic objective, equal budget (issue 16).

The objective is the squared error between the evaluated λ (sorted, as every sampler's proposals
are evaluated) and a hidden non-decreasing target drawn uniformly in the space's range — for
SmolLM2 at 4× (32 λ in [1, 5]) as the issue states it. No model: it measures the search alone.
Every sampler gets the same PI/NTK/YaRN seeds enqueued (``--seed-all``'s policy) except the
plain unseeded GA, and the same number of trials.

    python bench/synthetic.py                          # 600 trials, 3 seeds (≈ 15 min)
    python bench/synthetic.py --trials 200 --samplers longrope,longrope-adaptive,tpe

Prints the median and range over seeds of the best squared error, and the trials each sampler
needed to reach the paper evolution's final error.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def run(name: str, space, target: np.ndarray, trials: int, seed: int) -> tuple[list[float], float]:
    import optuna

    from longrope_opt.samplers import enqueue_space_seeds
    from longrope_opt.samplers import make_sampler

    options = {}
    if name.startswith("longrope") or name == "evolution":
        # the paper's default generation sizes, scaled to the budget as `compare` does
        options = dict(population_size=32, num_mutations=16, num_crossovers=16, num_parents=16)
    sampler = make_sampler(name, space=space, seed=seed, budget=trials, options=options)
    study = optuna.create_study(sampler=sampler)
    if name != "evolution":
        enqueue_space_seeds(study, space)

    def objective(trial) -> float:
        f = space.suggest(trial).factors
        return float(((f - target) ** 2).sum())

    t0 = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    seconds = time.perf_counter() - t0
    values = [t.value for t in study.trials]
    return list(np.minimum.accumulate(values)), seconds / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=600)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--samplers", default="longrope,longrope-adaptive,evolution,tpe,cmaes,ngopt,random"
    )
    parser.add_argument("--space", default="full", choices=["full", "critical"])
    args = parser.parse_args()
    for flag in ("trials", "seeds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be an integer >= 1, got {getattr(args, flag)}")
    names = [s.strip() for s in args.samplers.split(",") if s.strip()]
    if not names:
        parser.error(f"--samplers must name at least one sampler, got {args.samplers!r}")

    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.errors import InvalidArgumentError
    from longrope_opt.samplers import check_sampler_names
    from longrope_opt.space import SearchSpace

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = RopeSpec(head_dim=64, base=1e5, original_length=8192)  # SmolLM2-135M
    space = SearchSpace(spec, 32768, n_hat=(0,), shape=args.space)
    try:
        check_sampler_names(names)
    except InvalidArgumentError as exc:
        parser.error(str(exc))
    curves: dict[str, list[list[float]]] = {n: [] for n in names}
    cost: dict[str, list[float]] = {n: [] for n in names}
    for seed in range(args.seeds):
        rng = np.random.default_rng(100 + seed)
        target = np.sort(rng.uniform(space.low, space.high, spec.n_factors))
        for name in names:
            curve, per_trial = run(name, space, target, args.trials, seed)
            curves[name].append(curve)
            cost[name].append(per_trial)
            print(f"seed {seed} {name:<18} best {curve[-1]:9.4f}  {per_trial * 1e3:6.1f} ms/trial",
                  file=sys.stderr, flush=True)  # fmt: skip
    ref = "longrope" if "longrope" in names else names[0]
    print(f"\nsynthetic: 32 λ, sorted-uniform target in [{space.low:g}, {space.high:g}], "
          f"{args.trials} trials, {args.seeds} seeds, space {args.space}")  # fmt: skip
    print(f"{'sampler':<20}{'median best':>12}{'range':>22}{' trials to ' + ref:>24}{'ms/trial':>10}")
    for name in names:
        finals = [c[-1] for c in curves[name]]
        reach = []
        for c, r in zip(curves[name], curves[ref]):
            hit = [i for i, v in enumerate(c) if v <= r[-1]]
            reach.append(hit[0] + 1 if hit else None)
        shown = ",".join("-" if x is None else str(x) for x in reach)
        print(f"{name:<20}{np.median(finals):12.4f}   [{min(finals):8.4f}, {max(finals):8.4f}]"
              f"{shown:>24}{np.mean(cost[name]) * 1e3:10.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
