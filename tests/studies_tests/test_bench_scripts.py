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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*SYNTHETIC, "--trials", "0"], "--trials must be an integer >= 1, got 0"),
        ([*SYNTHETIC, "--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
        ([*SYNTHETIC, "--samplers", "longrope,annealing"], "unknown sampler 'annealing'"),
        ([*SYNTHETIC, "--samplers", " , "], "--samplers must name at least one sampler"),
        ([*OVERHEAD, "--trials", "-5"], "--trials must be >= 1, got -5"),
        ([*OVERHEAD, "--operators", "paper,greedy"], "--operators must name paper and/or adaptive"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str) -> None:
    bad = _run(argv)
    assert bad.returncode == 2 and message in bad.stderr, bad.stderr[-500:]
    assert "Traceback" not in bad.stderr and bad.stderr.count("error:") == 1
