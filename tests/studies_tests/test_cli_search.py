"""`longrope-opt search` / `export` end to end on a tiny model saved to disk, plus plugins."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.studies import record
from tests.conftest import default_sigint


ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _search_args(model: str, corpus: str, storage: str, n_trials: int, *extra: str) -> list[str]:
    return [
        "search",
        "--model",
        model,
        "--corpus",
        corpus,
        "--target-length",
        "256",
        "--samples",
        "2",
        "--storage",
        storage,
        "--study-name",
        "tiny",
        "--n-trials",
        str(n_trials),
        "--population-size",
        "6",
        "--num-mutations",
        "2",
        "--num-crossovers",
        "2",
        "--num-parents",
        "3",
        "--dtype",
        "float32",
        "--no-fuse",
        *extra,
    ]


def test_search_resumes_to_total_and_exports(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert main(_search_args(tiny_model_dir, tiny_corpus, storage, 8)) == 0
    out = capsys.readouterr().out
    assert "seed PI" in out and "seed NTK" in out and "seed YARN" in out and "best found" in out
    study = optuna.load_study(study_name="tiny", storage=storage)
    assert len(study.get_trials(states=FINISHED)) == 8
    # by default a candidate that cannot enter the population is pruned, its value kept
    assert all(t.value is not None for t in study.get_trials(states=(TrialState.PRUNED,)))
    assert record.read_config(study)[0]["pruner"] == "population"
    prov = record.read_provenance(study)
    assert prov["target_length"] == 256 and prov["original_length"] == 64 and prov["samples"] == 2
    assert set(prov["versions"]) >= {"torch", "transformers", "optuna", "longrope_opt"}
    # the same command with a larger total continues the same study
    assert main(_search_args(tiny_model_dir, tiny_corpus, storage, 14)) == 0
    study = optuna.load_study(study_name="tiny", storage=storage)
    assert len(study.get_trials(states=FINISHED)) == 14
    assert [t.user_attrs.get("seed") for t in study.trials].count(
        "pi"
    ) == 1  # seeds not re-enqueued
    out_file = tmp_path / "f.json"
    assert main(["export", "--storage", storage, "--study-name", "tiny", "-o", str(out_file)]) == 0
    exported = json.loads(out_file.read_text())
    assert exported["value"] == pytest.approx(study.best_value)
    rp = exported["rope_parameters"]
    assert rp["rope_type"] == "longrope" and len(rp["long_factor"]) == 8
    assert rp["original_max_position_embeddings"] == 64 and rp["factor"] == 4.0


def test_resume_with_other_target_length_is_refused(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert main(_search_args(tiny_model_dir, tiny_corpus, storage, 3)) == 0
    before = len(optuna.load_study(study_name="tiny", storage=storage).trials)
    args = _search_args(tiny_model_dir, tiny_corpus, storage, 6)
    args[args.index("--target-length") + 1] = "200"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "was created with `--target-length` 256; this run has 200" in err
    assert len(optuna.load_study(study_name="tiny", storage=storage).trials) == before


def test_ctrl_c_leaves_consistent_study_and_same_command_resumes(
    tiny_model_dir, tiny_corpus, tmp_path
) -> None:
    storage = f"sqlite:///{tmp_path / 'c.db'}"
    cmd = [
        sys.executable,
        "-m",
        "longrope_opt.cli",
        *_search_args(tiny_model_dir, tiny_corpus, storage, 400),
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            if len(optuna.load_study(study_name="tiny", storage=storage).trials) >= 10:
                break
        except KeyError:
            pass
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "rerun the same command to resume" in out
    study = optuna.load_study(study_name="tiny", storage=storage)
    states = {t.state for t in study.trials}
    assert TrialState.RUNNING not in states  # the interrupted trial was closed, not left dangling
    done = len(study.get_trials(states=FINISHED))
    assert main(_search_args(tiny_model_dir, tiny_corpus, storage, done + 3)) == 0
    study = optuna.load_study(study_name="tiny", storage=storage)
    assert len(study.get_trials(states=FINISHED)) == done + 3


def test_unknown_objective_lists_known_ones(tiny_model_dir, tiny_corpus, tmp_path, capsys) -> None:
    assert (
        main(
            _search_args(
                tiny_model_dir,
                tiny_corpus,
                f"sqlite:///{tmp_path / 'o.db'}",
                2,
                "--objective",
                "nope",
            )
        )
        == 2
    )
    assert f"unknown objective 'nope' for `--objective`; available: {', '.join(sorted(OBJECTIVES))}" in capsys.readouterr().err


def test_plugin_objective_from_installed_package_runs_by_name(
    tiny_model_dir, tiny_corpus, tmp_path
) -> None:
    pkg = tmp_path / "plugin_src"
    (pkg / "lro_plugin").mkdir(parents=True)
    (pkg / "lro_plugin" / "__init__.py").write_text(
        textwrap.dedent('''
        from longrope_opt.objectives import evaluate_perplexity

        class HalfPerplexity:
            """A user's objective: perplexity of the first sample only, tagged."""
            def __init__(self, model, samples, *, space, **options):
                self.model, self.samples, self.space = model, samples[:1], space
            def __call__(self, trial):
                trial.set_user_attr("plugin", "half")
                return evaluate_perplexity(self.model, self.samples, self.space.suggest(trial)).ppl
    ''')
    )
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "lro-plugin"
        version = "0.0.1"
        [project.entry-points."longrope_opt.objectives"]
        half-ppl = "lro_plugin:HalfPerplexity"
    """)
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(pkg),
        ],
        check=True,
    )
    storage = f"sqlite:///{tmp_path / 'p.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    cmd = [
        sys.executable,
        "-m",
        "longrope_opt.cli",
        *_search_args(tiny_model_dir, tiny_corpus, storage, 3, "--objective", "half-ppl"),
    ]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
    study = optuna.load_study(study_name="tiny", storage=storage)
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.user_attrs.get("plugin") for t in done] == ["half"] * 3
