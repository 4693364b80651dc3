"""The sampler benches of issue 16 (bench/synthetic.py, bench/sampler_overhead.py): a small run
prints a row per sampler, and bad input is one line and exit 2, not a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = [sys.executable, str(ROOT / "bench" / "synthetic.py")]
OVERHEAD = [sys.executable, str(ROOT / "bench" / "sampler_overhead.py")]
FITNESS = [sys.executable, str(ROOT / "bench" / "fitness_cost.py")]
BRANCHED = [sys.executable, str(ROOT / "bench" / "passkey_branched.py")]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_synthetic_prints_one_row_per_sampler() -> None:
    done = _run([*SYNTHETIC, "--trials", "12", "--seeds", "2", "--samplers", "longrope-adaptive,random"])
    assert done.returncode == 0, done.stderr[-500:]
    lines = done.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("sampler"))
    rows = {line.split()[0]: line.split() for line in lines[header + 1 :]}
    assert set(rows) == {"longrope-adaptive", "random"}
    for row in rows.values():  # the median best lies inside its range over seeds
        median, low, high = (float(x) for x in re.findall(r"\d+\.\d+", " ".join(row[1:]))[:3])
        assert low <= median <= high
    assert "12 trials, 2 seeds" in done.stdout


def test_overhead_prints_the_last_window_of_the_study() -> None:
    done = _run([*OVERHEAD, "--trials", "30", "--operators", "adaptive", "--no-random"])
    assert done.returncode == 0, done.stderr[-500:]
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["0-30"]
    assert [line.split(" (")[0] for line in lines[2:]] == ["longrope adaptive"] * 2


def test_fitness_cost_prints_both_searches_against_the_one_document_baseline(
    tiny_model_dir, tmp_path
) -> None:
    from tests.conftest import write_tiny_corpus

    corpus = write_tiny_corpus(tmp_path / "docs", n_docs=5, words=400)
    done = _run([*FITNESS, "--model", tiny_model_dir, "--corpus", corpus, "--length", "256",
                 "--trials", "8", "--dtype", "float32", "--storage",
                 f"sqlite:///{tmp_path / 'c.db'}"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    rows = {line[:36].strip(): line[36:].split() for line in done.stdout.splitlines()[2:]}
    several, one = rows["3 documents, pruner, retrieval (4)"], rows["1 document (baseline)"]
    assert several[0] == one[0] == "8"  # the same number of trials
    assert int(one[2]) <= 8 and int(several[2]) > int(one[2])  # documents read
    assert one[5] == one[7] == "1.00"  # the baseline against itself

    # --stored reads the same study back and runs nothing: the same documents, against 8
    import optuna

    storage = f"sqlite:///{tmp_path / 'c.db'}"
    name = next(n for n in optuna.get_all_study_names(storage) if not n.startswith("cost-1doc-"))
    counted = _run([*FITNESS, "--stored", "--storage", storage, "--study-name", name])
    assert counted.returncode == 0, counted.stderr[-1000:]
    assert f"documents read {several[2]} vs 8 for 1 document" in counted.stdout
    assert f"{several[3]} passkey prompts" in counted.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*SYNTHETIC, "--trials", "0"], "--trials must be an integer >= 1, got 0"),
        ([*SYNTHETIC, "--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        ([*SYNTHETIC, "--samplers", "longrope,annealing"], "unknown sampler 'annealing'"),
        ([*SYNTHETIC, "--samplers", " , "], "--samplers must name at least one sampler"),
        ([*OVERHEAD, "--trials", "-5"], "--trials must be >= 1, got -5"),
        ([*OVERHEAD, "--operators", "paper,greedy"], "--operators must name surrogate, paper and/or adaptive"),
        ([*FITNESS, "--trials", "2"], "--trials must be >= 4"),
        ([*FITNESS, "--stored"], "--stored needs --study-name"),
        ([*BRANCHED, "--keys", "0"], "--keys must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str) -> None:
    bad = _run(argv)
    assert bad.returncode == 2 and message in bad.stderr, bad.stderr[-500:]
    assert "Traceback" not in bad.stderr and bad.stderr.count("error:") == 1


def test_the_landscape_bench_runs_as_its_docs_say() -> None:
    # `bench/landscape_bench.py` imports `bench.landscapes`: documented as `python -m` from the
    # repository root, which is how it must keep working
    done = _run([sys.executable, "-m", "bench.landscape_bench", "--table"])
    assert done.returncode == 0, done.stderr[-500:]
    assert "quadratic" in done.stdout and "longrope" in done.stdout
    leaders = _run([sys.executable, "-m", "bench.landscape_bench", "--leaders"])
    assert leaders.returncode == 0, leaders.stderr[-500:]
    rows = [line for line in leaders.stdout.splitlines() if line.startswith("quadratic 4x")]
    assert rows and all("leads" in line or "behind by" in line for line in rows)
    assert "python -m bench.landscape_bench" in (ROOT / "docs" / "benchmarks.md").read_text()
