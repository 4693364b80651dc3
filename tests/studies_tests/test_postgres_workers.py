"""Many workers on one study in a real PostgreSQL server; SIGKILLed workers; exact budgets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers._state import GENERATION_KEY
from longrope_opt.samplers._state import PARENTS_KEY_PREFIX
from longrope_opt.samplers._state import is_enqueued
from longrope_opt.studies import space_of_study
from tests.studies_tests.test_processes import _candidate
from tests.studies_tests.test_processes import _start


pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # worker processes end to end (~100 s)
ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)
P, N1, N2, K = 8, 4, 4, 4


def _worker_cmd(url: str, name: str) -> list[str]:
    return [
        sys.executable, "-m", "longrope_opt.cli", "worker", "--storage", url, "--study-name",
        name, "--dtype", "float32", "--no-fuse", "--heartbeat-interval", "2",
    ]  # fmt: skip


def test_four_workers_share_one_budget_exactly(tiny_model_dir, tiny_corpus, postgres_url) -> None:
    name, total = f"four-{os.getpid()}", 60
    # `search` creates the study (config, seeds, total) without running a trial (timeout 0); no
    # pruner, so every trial of the budget completes and the count below is exact.
    assert main([
        "search", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--target-length", "256",
        "--samples", "2", "--storage", postgres_url, "--study-name", name, "--n-trials",
        str(total), "--timeout", "0", "--population-size", str(P), "--num-mutations", str(N1),
        "--num-crossovers", str(N2), "--num-parents", str(K), "--dtype", "float32", "--no-fuse",
        "--pruner", "none",
    ]) == 0  # fmt: skip
    start = time.perf_counter()
    workers = [
        subprocess.Popen(_worker_cmd(postgres_url, name), cwd=ROOT, stdout=subprocess.DEVNULL)
        for _ in range(4)
    ]
    assert [w.wait(timeout=900) for w in workers] == [0, 0, 0, 0]
    print(f"4 workers: {total} trials in {time.perf_counter() - start:.1f} s")

    study = optuna.load_study(study_name=name, storage=postgres_url)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(complete) == total
    candidates = [_candidate(t) for t in complete]
    assert len(set(candidates)) == total  # no candidate evaluated twice
    seeds = [t.user_attrs["seed"] for t in complete if "seed" in t.user_attrs]
    assert len(seeds) == len(set(seeds))  # each seed measured once
    assert {"pi", "ntk", "yarn"} <= set(seeds)
    # Generation bookkeeping. A trial that never reached the sampler (two workers passed the
    # budget check together; the later one's trial fails as surplus without sampling) opens no
    # generation; every other trial is tagged, no generation is over its capacity, and the
    # parents of a generation that was sampled are complete trials of earlier generations, at
    # most K of them: those the workers fixed (read back) or, for a generation whose every trial
    # was sampled before the one before had finished, chosen now.
    sampler = LongRoPESampler(
        space=space_of_study(study), population_size=P, num_mutations=N1, num_crossovers=N2,
        num_parents=K,
    )  # fmt: skip
    by_gen: dict[int, list] = {}
    for t in study.get_trials(deepcopy=False):
        if "surplus" in t.user_attrs and not is_enqueued(t):
            assert GENERATION_KEY not in t.system_attrs and not t.params
            continue
        by_gen.setdefault(t.system_attrs[GENERATION_KEY], []).append(t)
    assert sorted(by_gen) == list(range(len(by_gen)))
    for g, trials in by_gen.items():
        assert len(trials) <= (P if g == 0 else N1 + N2)
        if g == 0 or all(is_enqueued(t) for t in trials):
            continue  # enqueued trials are evaluated without parents
        parents = sampler.get_parents(study, g)
        assert 0 < len(parents) <= K
        for t in parents:
            assert t.state == TrialState.COMPLETE and t.system_attrs[GENERATION_KEY] < g
        stored = study._storage.get_study_system_attrs(study._study_id)
        assert stored[f"{PARENTS_KEY_PREFIX}{g}"] == [t.number for t in parents]  # fixed now


def test_sigkill_a_worker_three_times(postgres_url) -> None:
    name, total = f"kill3-{os.getpid()}", 40
    killed = []
    hang_from = 6
    for _ in range(3):
        worker = _start(postgres_url, name, total, seed=2, sleep=0.02, hang_from=hang_from)
        deadline = time.time() + 180
        while time.time() < deadline:
            time.sleep(0.2)
            try:
                study = optuna.load_study(study_name=name, storage=postgres_url)
            except KeyError:
                continue
            running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if any(t.number >= hang_from and "pid" in t.user_attrs for t in running):
                break
        worker.send_signal(signal.SIGKILL)  # mid-evaluation: the trial hangs after suggesting
        worker.wait()
        study = optuna.load_study(study_name=name, storage=postgres_url)
        before = {t.number: t.value for t in study.get_trials(states=(TrialState.COMPLETE,))}
        now_running = [t.number for t in study.get_trials(states=(TrialState.RUNNING,))]
        assert len(now_running) == 1
        killed.append(now_running[0])
        hang_from = max(study.trials[-1].number + 1, len(before) + 4)
        time.sleep(4.5)  # past the grace period (2 heartbeats of 2 s)
    assert _start(postgres_url, name, total, seed=2, sleep=0.01).wait(timeout=300) == 0

    study = optuna.load_study(study_name=name, storage=postgres_url)
    after = {t.number: t.value for t in study.get_trials(states=(TrialState.COMPLETE,))}
    assert all(after[n] == v for n, v in before.items())  # nothing completed was lost
    assert len(after) == total  # the exact total
    for number in killed:
        stale = study.trials[number]
        assert stale.state == TrialState.FAIL
        retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == number]
        assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
        assert retried[0].params == stale.params


_OPEN_AT = """
import sys, time
from longrope_opt.studies import make_storage
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every process opens at the same moment
make_storage(sys.argv[1], heartbeat_interval=2)
"""


def test_workers_opening_a_new_database_together_all_start(postgres_url) -> None:
    # Each finds no schema and creates it; all but one then fail on an enum type or a table the
    # first one made, unless the storage is opened again once the schema exists.
    import psycopg2

    db = f"fresh_{os.getpid()}_{time.monotonic_ns()}"
    server = postgres_url.replace("postgresql+psycopg2://", "postgresql://").rsplit("/", 1)[0]
    admin = psycopg2.connect(f"{server}/postgres")
    admin.autocommit = True  # CREATE DATABASE refuses to run in a transaction
    admin.cursor().execute(f"CREATE DATABASE {db}")
    try:
        at = str(time.time() + 8.0)  # after every process has imported the package
        procs = [
            subprocess.Popen([sys.executable, "-c", _OPEN_AT, f"{server}/{db}", at], cwd=ROOT,
                             stderr=subprocess.PIPE, text=True)
            for _ in range(8)
        ]  # fmt: skip
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, [e[-400:] for e in errors if e]
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.close()
