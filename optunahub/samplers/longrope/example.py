"""The LongRoPE sampler on a synthetic objective over a non-decreasing vector, in seconds.

Run from a clone (offline): ``python optunahub/samplers/longrope/example.py``. From the registry
the module comes from ``optunahub.load_module("samplers/longrope")`` instead.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import optuna
import optunahub


optuna.logging.set_verbosity(optuna.logging.WARNING)


here = os.path.dirname(os.path.abspath(__file__))
module = optunahub.load_local_module("samplers/longrope", registry_root=os.path.dirname(os.path.dirname(here)))

# A hidden non-decreasing target: the objective is the squared distance to it.
n = 16
target = np.sort(np.random.default_rng(0).uniform(1.0, 4.0, n))
names = [f"x{i:02d}" for i in range(n)]


def objective(trial: optuna.Trial) -> float:
    x = np.array([trial.suggest_float(name, 1.0, 4.0) for name in names])
    return float(((x - target) ** 2).sum())


space = module.MonotoneSpace(
    names, 1.0, 4.0, seeds={"flat": np.full(n, 2.5), "linear": np.linspace(1.0, 4.0, n)}
)
with tempfile.TemporaryDirectory() as tmp:
    storage = f"sqlite:///{tmp}/longrope.db"
    kwargs = dict(space=space, population_size=16, num_mutations=8, num_crossovers=8,
                  num_parents=8, operators="adaptive", seed=0)  # fmt: skip
    sampler = module.LongRoPESampler(**kwargs)
    study = optuna.create_study(study_name="monotone", storage=storage, sampler=sampler)
    module.enqueue_seeds(study, sampler)  # the seeds are ordinary enqueued trials
    study.optimize(objective, n_trials=60)
    print(f"after 60 trials: best {study.best_value:.4f}")

    # Resume: a new process (here: a new sampler) continues from the state in the storage.
    study = optuna.load_study(
        study_name="monotone", storage=storage, sampler=module.LongRoPESampler(**kwargs)
    )
    study.optimize(objective, n_trials=60)
    best = np.array([study.best_params[name] for name in names])
    print(f"after 120 trials: best {study.best_value:.4f}, monotone: {bool(np.all(np.diff(best) >= 0))}")
