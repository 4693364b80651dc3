"""Throughput of 1, 4 and 16 worker processes on each storage: trials/s and the sampler's cost.

For each storage (a SQLite file, PostgreSQL, PostgreSQL behind Optuna's gRPC proxy started with
`longrope-opt storage-server`, a journal file) and each objective (instant; one second of sleep,
which stands for a GPU evaluation that leaves the CPU free), N processes run the LongRoPE sampler
with claims and heartbeat on one study until its total. It prints trials/s (first trial start to
last trial end, process start-up excluded), its ratio to 1 worker on the same storage, and the
median milliseconds from a trial's start to its objective's start: the sampler's proposal with
its claim and the storage reads it needs. A throwaway PostgreSQL server is started with
.ci/postgres.sh. On a 2-core machine 16 processes share two cores: the instant objective measures
contention, the 1-second one how close the storages come to N x 1 trial/s.

    python bench/workers.py                               # everything (~15 min on 2 cores)
    python bench/workers.py --storages sqlite,journal --workers 1,4 --trials 120
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from longrope_opt import RopeSpec
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.space import SearchSpace
from longrope_opt.studies import make_storage
from longrope_opt.studies import run_study


ROOT = Path(__file__).resolve().parents[1]
STORAGES = ["sqlite", "postgres", "grpc", "journal"]


def _space():
    return SearchSpace(RopeSpec(head_dim=64, base=10000.0, original_length=2048), 8192)


def worker(url: str, name: str, total: int, sleep: float) -> None:
    """One worker process: the LongRoPE sampler on a synthetic objective until the total."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = _space()
    target = np.linspace(1.0, 4.0, space.spec.n_factors)
    sampler = LongRoPESampler(space=space, population_size=16, num_mutations=8,
                              num_crossovers=8, num_parents=8)  # fmt: skip
    storage = make_storage(url, heartbeat_interval=30)
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                load_if_exists=True)  # fmt: skip
    enqueue_seeds(study, sampler)

    def objective(trial: optuna.Trial) -> float:
        started = trial.datetime_start
        ask = (time.time() - started.timestamp()) * 1e3 if started is not None else float("nan")
        scaling = space.suggest(trial)
        trial.set_user_attr("ask_ms", ask)
        time.sleep(sleep)
        return float(np.mean((scaling.factors - target) ** 2))

    run_study(study, objective, n_trials=total, show_progress_bar=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            raise SystemExit("storage-server exited before listening")
        time.sleep(0.3)
    raise SystemExit("storage-server did not start listening")


def _measure(url: str, read_url: str, name: str, n: int, total: int, sleep: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--worker", url, name, str(total), str(sleep)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env) for _ in range(n)]
    codes = [p.wait() for p in procs]
    study = optuna.load_study(study_name=name, storage=read_url)
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    first = min(t.datetime_start for t in done if t.datetime_start is not None)
    last = max(t.datetime_complete for t in done if t.datetime_complete is not None)
    seconds = (last - first).total_seconds()
    asks = [t.user_attrs["ask_ms"] for t in done if "ask_ms" in t.user_attrs]
    return {"complete": len(done), "seconds": seconds, "rate": len(done) / seconds,
            "ask_ms": statistics.median(asks), "codes": codes}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[-2:]),
    )  # fmt: skip
    parser.add_argument("--storages", default=",".join(STORAGES), help="comma-separated")
    parser.add_argument("--workers", default="1,4,16", help="comma-separated counts")
    parser.add_argument("--trials", type=int, default=200, help="total with the instant objective")
    parser.add_argument("--slow-trials", type=int, default=4, help="trials per worker, 1-s objective")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, name, total, sleep = args.worker
        worker(url, name, int(total), float(sleep))
        return
    storages = args.storages.split(",")
    unknown = [s for s in storages if s not in STORAGES]
    if unknown:
        parser.error(f"--storages must be among {','.join(STORAGES)}, got {unknown[0]!r}")
    counts = [int(x) for x in args.workers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="longrope-bench-"))
    work.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    pg_url = proxy = None
    if {"postgres", "grpc"} & set(storages):
        port = _free_port()
        pg_url = subprocess.run(
            ["bash", str(ROOT / ".ci/postgres.sh"), "start", str(work / "pg"), str(port)],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    rows = []
    try:
        for kind in storages:
            if kind == "grpc":
                port = _free_port()
                proxy = subprocess.Popen(
                    [sys.executable, "-m", "longrope_opt.cli", "storage-server", "--storage",
                     str(pg_url), "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                _wait_listening(port, proxy)
            for sleep in (0.0, 1.0):
                for n in counts:
                    name = f"bench-{kind}-{n}-{sleep}"
                    total = args.trials if sleep == 0.0 else args.slow_trials * n
                    if kind == "sqlite":
                        url = read = f"sqlite:///{work / f'{name}.db'}"
                        make_storage(url)  # the schema before n processes open the file
                    elif kind == "journal":
                        url = f"journal:///{work / f'{name}.log'}"
                        read = make_storage(url)
                    elif kind == "postgres":
                        url = read = str(pg_url)
                    else:
                        url, read = f"grpc://127.0.0.1:{port}", str(pg_url)
                    row = _measure(url, read, name, n, total, sleep)
                    rows.append((kind, sleep, n, row))
                    print(f"{kind} {sleep:.0f}s x{n}: {row}", file=sys.stderr, flush=True)
            if proxy is not None:
                proxy.terminate()
                proxy.wait(timeout=30)
                proxy = None
    finally:
        if proxy is not None:
            proxy.terminate()
        if pg_url:
            subprocess.run(["bash", str(ROOT / ".ci/postgres.sh"), "stop", str(work / "pg")],
                           check=False, capture_output=True)  # fmt: skip
    print(f"LongRoPE sampler (population 16), synthetic objective, {os.cpu_count()} CPU cores; "
          "trials/s from first trial start to last trial end")  # fmt: skip
    print(f"{'storage':>9} {'objective':>9} {'workers':>7} {'trials':>6} {'trials/s':>9} "
          f"{'x 1 worker':>10} {'ask ms':>7}  exit codes")  # fmt: skip
    base: dict[tuple[str, float], float] = {}
    for kind, sleep, n, row in rows:
        base.setdefault((kind, sleep), row["rate"])
        label = "instant" if sleep == 0.0 else "1 s"
        print(f"{kind:>9} {label:>9} {n:>7} {row['complete']:>6} {row['rate']:>9.2f} "
              f"{row['rate'] / base[(kind, sleep)]:>10.2f} {row['ask_ms']:>7.1f}  {row['codes']}")  # fmt: skip


if __name__ == "__main__":
    main()
