"""Does the LongRoPE sampler's cost per trial stay flat as a study grows? (issue 16)

A study on SQLite with an instant objective (squared error to a fixed λ), so all time is
Optuna's and the sampler's. Prints the mean time per trial in windows of the study (ms), for the
sampler's own work (`before_trial` + `sample_relative`) and for the whole trial, next to
Optuna's `RandomSampler` in the same process (the storage's own cost per trial).

    python bench/sampler_overhead.py                   # 2,000 trials (≈ 5 min)
    python bench/sampler_overhead.py --trials 600 --operators paper
    python bench/sampler_overhead.py --trials 600 --dims 32,128 --no-random   # SmolLM2 vs Gemma 3

`--dims`: the rotary frequencies searched: 32 is SmolLM2's space (head 64, θ 1e5, 8k → 32k),
128 Gemma 3 270M's (head 256, θ 1e6, 32k → 128k); each gets its own rows, in one process.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def measure(make, trials: int, space, target) -> tuple[np.ndarray, np.ndarray]:
    import optuna

    # On tmpfs when there is one: the disk's fsync per commit would swamp what is measured.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        storage = f"sqlite:///{tmp}/overhead.db"
        sampler = make()
        study = optuna.create_study(storage=storage, sampler=sampler)
        if hasattr(sampler, "seed_params"):
            for name, params in sampler.seed_params():
                study.enqueue_trial(params, user_attrs={"seed": name})
        own = np.zeros(trials)
        for name in ("before_trial", "sample_relative"):
            inner = getattr(sampler, name)

            def timed(study_, trial, *rest, _inner=inner):
                t0 = time.perf_counter()
                try:
                    return _inner(study_, trial, *rest)
                finally:
                    if trial.number < trials:
                        own[trial.number] += time.perf_counter() - t0

            setattr(sampler, name, timed)
        whole = np.zeros(trials)
        for i in range(trials):
            t0 = time.perf_counter()
            trial = study.ask()
            f = space.suggest(trial).factors
            study.tell(trial, float(((f - target) ** 2).sum()))
            whole[i] = time.perf_counter() - t0
        return own * 1e3, whole * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--operators", default="surrogate,paper")
    parser.add_argument("--no-random", action="store_true", help="skip the RandomSampler row")
    parser.add_argument("--dims", default="32", help="searched frequencies: 32 and/or 128")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error(f"--trials must be >= 1, got {args.trials}")
    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    if not operators or set(operators) - {"paper", "adaptive", "surrogate"}:
        parser.error(f"--operators must name surrogate, paper and/or adaptive, got {args.operators!r}")

    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.samplers import LongRoPESampler
    from longrope_opt.space import SearchSpace

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    specs = {32: RopeSpec(head_dim=64, base=1e5, original_length=8192),
             128: RopeSpec(head_dim=256, base=1e6, original_length=32768)}  # fmt: skip
    dims = [int(d) for d in args.dims.split(",")]
    if not dims or set(dims) - set(specs):
        parser.error(f"--dims must name 32 and/or 128, got {args.dims!r}")
    runs = {}
    for d in dims:
        spec = specs[d]
        space = SearchSpace(spec, 4 * spec.original_length)
        target = np.sort(np.random.default_rng(0).uniform(1, 5, d))
        tag = f" {d}d" if len(dims) > 1 else ""
        if not args.no_random:
            runs[f"random (Optuna){tag}"] = (lambda: optuna.samplers.RandomSampler(seed=0),
                                             space, target)  # fmt: skip
        for ops in operators:
            runs[f"longrope {ops}{tag}"] = (lambda ops=ops, space=space: LongRoPESampler(
                space=space, seed=0, population_size=64, num_mutations=16, num_crossovers=16,
                num_parents=32, operators=ops,
            ), space, target)  # fmt: skip
    # Early windows, then the study's last 100 trials: "flat" means the last matches the first.
    last = max(0, args.trials - 100)
    windows = [(a, a + 100) for a in (0, 100, 500, 1000, 1500) if a + 100 <= last]
    windows.append((last, args.trials))
    header = "".join(f"{f'{a}-{b}':>12}" for a, b in windows)
    print(f"mean ms per trial on SQLite, in windows of the study's trials\n{'':<30}{header}")
    for name, (make, space, target) in runs.items():
        own, whole = measure(make, args.trials, space, target)
        if name.startswith("longrope"):
            print(f"{name + ' (sampler)':<30}" + "".join(f"{own[a:b].mean():12.1f}" for a, b in windows))
        print(f"{name + ' (whole trial)':<30}" + "".join(f"{whole[a:b].mean():12.1f}" for a, b in windows))


if __name__ == "__main__":
    main()
