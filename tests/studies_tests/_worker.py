"""A search process for the process-level tests: a cheap synthetic objective on a real SQLite file.

    python -m tests.studies_tests._worker STORAGE STUDY N_TRIALS SEED SLEEP [HANG_FROM [HEARTBEAT]]
Each trial sleeps SLEEP seconds and records its pid; trials numbered HANG_FROM or more hang for a
minute after suggesting their candidate, so a test can kill the process mid-evaluation.
HEARTBEAT is the trial heartbeat's interval in seconds (default 1).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import optuna

from longrope_opt import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.space import SearchSpace
from longrope_opt.studies import make_storage
from longrope_opt.studies import run_study


SPACE = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 256)
TARGET = np.linspace(1.2, 4.8, SPACE.spec.n_factors)


def objective(trial: optuna.Trial, sleep: float, hang_from: int) -> float:
    scaling = SPACE.suggest(trial)
    trial.set_user_attr("pid", os.getpid())
    time.sleep(60.0 if trial.number >= hang_from else sleep)
    return float(np.mean((scaling.factors - TARGET) ** 2))


def make_sampler(seed: int | None = None) -> LongRoPESampler:
    """The workers' sampler (a test rebuilds it to read a finished study's generations)."""
    return LongRoPESampler(
        space=SPACE, population_size=8, num_mutations=3, num_crossovers=3, num_parents=4, seed=seed
    )


def main() -> None:
    url, name, n_trials, seed, sleep = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
        float(sys.argv[5]),
    )
    hang_from = int(sys.argv[6]) if len(sys.argv) > 6 else 10**9
    heartbeat = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = make_storage(url, heartbeat_interval=heartbeat)
    sampler = make_sampler(seed)
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, load_if_exists=True
    )
    enqueue_seeds(study, sampler)
    run_study(
        study, lambda t: objective(t, sleep, hang_from), n_trials=n_trials, show_progress_bar=False
    )


if __name__ == "__main__":
    main()
