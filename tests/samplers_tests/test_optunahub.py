"""The OptunaHub package: up to date with the project, imports only Optuna/NumPy/stdlib, loads
with `optunahub.load_local_module`, proposes monotone unique candidates, resumes from storage."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest


ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "optunahub" / "samplers" / "longrope"
os.environ["OPTUNAHUB_NO_ANALYTICS"] = "1"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_package_is_generated_from_the_current_project_code() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "optunahub" / "build.py"), "--check"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_the_package_imports_only_optuna_numpy_and_the_standard_library() -> None:
    allowed = {"optuna", "numpy", *sys.stdlib_module_names}
    for path in FOLDER.glob("*.py"):
        allowed_here = allowed | ({"optunahub"} if path.name == "example.py" else set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed_here, (path.name, roots)
    for name in ("README.md", "LICENSE", "__init__.py", "example.py"):
        assert (FOLDER / name).is_file()
    front = (FOLDER / "README.md").read_text().split("---")[1]
    for key in ("author:", "title:", "description:", "tags:", "optuna_versions:", "license:"):
        assert key in front
    assert "sampler" in front.split("tags:")[1].split("\n")[0]


@pytest.fixture()
def module():
    import optunahub

    return optunahub.load_local_module("samplers/longrope", registry_root=str(ROOT / "optunahub"))


@pytest.mark.parametrize("operators", ["paper", "adaptive"])
def test_loaded_package_searches_monotone_unique_and_resumes(module, tmp_path, operators) -> None:
    n = 10
    names = [f"x{i}" for i in range(n)]
    target = np.sort(np.random.default_rng(1).uniform(1.0, 3.0, n))
    space = module.MonotoneSpace(names, 1.0, 3.0, seeds={"flat": np.full(n, 2.0)})

    def objective(trial: optuna.Trial) -> float:
        x = np.array([trial.suggest_float(name, 1.0, 3.0) for name in names])
        return float(((x - target) ** 2).sum())

    kwargs = dict(space=space, population_size=8, num_mutations=4, num_crossovers=4,
                  num_parents=4, operators=operators, seed=3)  # fmt: skip
    storage = f"sqlite:///{tmp_path / 'hub.db'}"
    sampler = module.LongRoPESampler(**kwargs)
    study = optuna.create_study(study_name="hub", storage=storage, sampler=sampler)
    assert module.enqueue_seeds(study, sampler) == 1
    study.optimize(objective, n_trials=24)  # generation 0 and two more
    resumed = optuna.load_study(
        study_name="hub", storage=storage, sampler=module.LongRoPESampler(**kwargs)
    )
    assert module.enqueue_seeds(resumed, resumed.sampler) == 0  # seeds are not repeated
    resumed.optimize(objective, n_trials=16)
    trials = resumed.trials
    vectors = [tuple(t.params[name] for name in names) for t in trials]
    assert len(trials) == 40 and len(set(vectors)) == 40  # unique across the restart
    assert all(np.all(np.diff(v) >= 0) for v in vectors)
    gens = [t.system_attrs["LongRoPESampler:generation"] for t in trials]
    assert gens == sorted(gens) and max(gens) == 4  # the new sampler continued the generations
    assert min(t.value for t in trials[24:]) <= min(t.value for t in trials[:24])


def test_example_runs_offline() -> None:
    run = subprocess.run(
        [sys.executable, str(FOLDER / "example.py")], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OPTUNAHUB_NO_ANALYTICS": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "monotone: True" in run.stdout
