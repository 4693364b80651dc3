"""`studies/extend_4x_smollm2.py` end to end on a tiny model: search, re-rank, table, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna

from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]


def test_extend_script_runs_every_stage_and_resumes(tiny_model_dir, tmp_path) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=7, words=300)
    out = tmp_path / "x4"
    cmd = [
        sys.executable, str(ROOT / "studies" / "extend_4x_smollm2.py"), "--model", tiny_model_dir,
        "--corpus", corpus, "--target-length", "256", "--skip-tokens", "96", "--trials", "6",
        "--rerank", "2", "--held-out", "3", "--keys", "2", "--out", str(out), "--dtype", "float32",
    ]  # fmt: skip
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "best classic method" in first.stdout
    raw = json.loads(out.with_suffix(".json").read_text())
    assert {"none", "pi", "ntk", "yarn", "yarn-cd", "ntk-cd", "plain-search", "new-search"} <= set(raw)
    assert all(len(row["ppl"]) == 3 and len(row["passkey128"]) == 2 for row in raw.values())
    storage = f"sqlite:///{out}.db"
    new = optuna.load_study(study_name="4x-new", storage=storage)
    assert len(new.user_attrs["longrope_opt:rerank"]) == 2
    assert new.user_attrs["longrope_opt:search_config"]["space"] == "critical"
    # held-out documents never reach a search
    held = set(new.user_attrs["longrope_opt:search_config"]["exclude_docs"])
    assert len(held) == 3 and not held & set(new.user_attrs["provenance"].get("doc_ids", []))
    # rerunning only reads: nothing is evaluated again
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "rerank" not in again.stdout and len(optuna.load_study(
        study_name="4x-new", storage=storage).trials) == len(new.trials)  # fmt: skip
    # more keys for one method: only its new keys run, the others' results are kept
    more = subprocess.run(cmd + ["--keys", "3", "--passkey-methods", "new-search"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    after = json.loads(out.with_suffix(".json").read_text())
    assert after["new-search"]["passkey128"][:2] == raw["new-search"]["passkey128"]
    assert len(after["new-search"]["passkey256"]) == 3 and after["pi"] == raw["pi"]
    bad = subprocess.run(cmd + ["--passkey-methods", "longrope"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)  # fmt: skip
    assert bad.returncode != 0 and "--passkey-methods: unknown ['longrope']" in bad.stderr
