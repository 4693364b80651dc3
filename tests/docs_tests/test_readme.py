"""The README is a front door: short, the two set-up commands, and the results as one table."""

from __future__ import annotations

import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_the_readme_reads_in_two_minutes() -> None:
    assert len(README.splitlines()) <= 150


def test_exactly_two_setup_commands() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", _section("Set-up"), re.S)
    assert [b.strip() for b in blocks] == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e '.[dev]' "
        "&& longrope-opt extend smollm2-135m --to 16k --budget 20m",
        "bash .ci/run",
    ]


def test_the_results_are_one_table_with_a_row_per_model_and_ratio() -> None:
    results = _section("Results")
    rows = [line for line in results.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:4] == ["model", "ratio", "ship", "perplexity vs best formula"]
    assert {"passkeys", "held out", "machine"} <= set(header)
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]
    assert {r[0] for r in body} >= {"SmolLM2-135M", "Gemma 3 270M"}
    assert all(len(r) == len(header) for r in body)
    # every finished row carries its interval; the prose lives on the results page
    assert all(re.search(r"\[\d\.\d+, \d\.\d+\]", r[3]) for r in body if r[3] != "—")
    assert "(docs/results.md)" in results and len(results.splitlines()) < 30
