"""Throughput of 1 vs 4 `longrope-opt worker` processes on one PostgreSQL study (issue 7).

Starts a throwaway PostgreSQL server (.ci/postgres.sh), creates one study per run with
`longrope-opt search --timeout 0` (a tiny random Llama saved to disk, its perplexity at
--length tokens as the objective), runs N workers until the study's total, and prints trials/s
and the ratio to 1 worker, measured in this process. On this 2-core machine, more workers than
cores share the CPU; the number that matters is that the budget and results stay exact.

    python bench/workers.py                 # 1 and 4 workers, 80 trials each
    python bench/workers.py --trials 200 --length 2048
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=80)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--workers", default="1,4")
    args = parser.parse_args()

    import optuna
    from optuna.trial import TrialState

    from tests.conftest import save_tiny_model_dir
    from tests.conftest import write_tiny_corpus

    work = Path(tempfile.mkdtemp(prefix="longrope-bench-"))
    work.chmod(0o755)
    model = save_tiny_model_dir(work / "model")
    corpus = write_tiny_corpus(work / "corpus", n_docs=3, words=args.length + 50)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pg = work / "pg"
    url = subprocess.run(
        ["bash", str(ROOT / ".ci/postgres.sh"), "start", str(pg), str(port)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    cli = [sys.executable, "-m", "longrope_opt.cli"]
    common = ["--dtype", "float32", "--no-fuse", "--heartbeat-interval", "5"]
    rows = []
    try:
        for n in [int(x) for x in args.workers.split(",")]:
            name = f"bench-{n}"
            subprocess.run(
                [*cli, "search", "--model", model, "--corpus", corpus, "--target-length",
                 str(args.length), "--samples", "2", "--storage", url, "--study-name", name,
                 "--n-trials", str(args.trials), "--timeout", "0", "--population-size", "8",
                 "--num-mutations", "4", "--num-crossovers", "4", "--num-parents", "4", *common],
                check=True, capture_output=True, cwd=ROOT,
            )  # fmt: skip
            start = time.perf_counter()
            procs = [
                subprocess.Popen(
                    [*cli, "worker", "--storage", url, "--study-name", name, *common],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "OMP_NUM_THREADS": str(max(1, 2 // n))},
                )  # fmt: skip
                for _ in range(n)
            ]
            codes = [p.wait() for p in procs]
            seconds = time.perf_counter() - start
            study = optuna.load_study(study_name=name, storage=url)
            complete = len(study.get_trials(states=(TrialState.COMPLETE,)))
            rows.append((n, complete, seconds, codes))
    finally:
        subprocess.run(["bash", str(ROOT / ".ci/postgres.sh"), "stop", str(pg)], check=False)
    base = rows[0][1] / rows[0][2]
    print(
        f"tiny Llama, perplexity of 2 x {args.length} tokens per trial, PostgreSQL, "
        f"{os.cpu_count()} CPU cores; wall time includes process start-up"
    )
    print(
        f"{'workers':>8} {'complete':>9} {'seconds':>8} {'trials/s':>9} {'ratio':>6}  exit codes"
    )
    for n, complete, seconds, codes in rows:
        rate = complete / seconds
        print(f"{n:>8} {complete:>9} {seconds:>8.1f} {rate:>9.2f} {rate / base:>6.2f}  {codes}")


if __name__ == "__main__":
    main()
