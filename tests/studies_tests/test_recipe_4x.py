"""`studies/extend_4x_smollm2.py`, the 4x recipe, end to end on a tiny model, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]


def test_recipe_searches_reranks_guards_validates_and_resumes(tiny_model_dir, tmp_path) -> None:
    search = write_tiny_corpus(tmp_path / "search", n_docs=4, words=600)
    held = write_tiny_corpus(tmp_path / "held", n_docs=3, words=600, seed=1)
    run = [sys.executable, str(ROOT / "studies" / "extend_4x_smollm2.py"), "--model",
           tiny_model_dir, "--search-corpus", search, "--corpus", held, "--target-length", "256",
           "--trials", "6", "--population", "4", "--rerank", "2", "--guard-keys", "2", "--docs",
           "2", "--keys", "2", "--retrieval-keys", "2", "--rerank-samples", "4",
           "--classic", "yarn,yarn-cd", "--storage",
           f"sqlite:///{tmp_path / 'x.db'}"]  # fmt: skip
    first = subprocess.run(run, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "verdict 4x-kinds:guarded" in first.stdout
    assert "overfit 4x-kinds:" in first.stdout and "in-sample" in first.stdout
    assert "reference: yarn" in first.stdout  # one of the classic rows asked for
    again = subprocess.run(run, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 measurements made now" in again.stdout  # search, re-rank, guard, table: all stored
    bad = subprocess.run([*run[:2], "--corpus", held, "--docs", "1"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == "extend_4x_smollm2.py: error: --docs must be >= 2, got 1"
