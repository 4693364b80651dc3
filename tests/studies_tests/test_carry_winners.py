"""`bench/carry_winners.py`: the carry rule, and the bench end to end on a tiny model."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY_LENGTH
from tests.conftest import tiny_config
from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("method", ["pi", "ntk", "yarn-cd"])
@pytest.mark.parametrize(("s_from", "s_to"), [(4, 8), (8, 4), (2, 16)])
def test_carry_takes_a_classic_method_at_one_scale_to_itself_at_another(
    method: str, s_from: int, s_to: int
) -> None:
    x4 = _load("x4", ROOT / "studies" / "extend_4x_smollm2.py")
    carry = _load("carry", ROOT / "bench" / "carry_winners.py").carry
    config = tiny_config("llama")
    found = x4.classic_methods(config, s_from * TINY_LENGTH)[method]
    wanted = x4.classic_methods(config, s_to * TINY_LENGTH)[method]
    carried = carry(found, s_from, s_to, "c")
    np.testing.assert_allclose(carried.factors, wanted.factors, rtol=1e-12)
    assert carried.n_hat == wanted.n_hat
    assert carried.attention_scale == pytest.approx(wanted.attention_scale, rel=1e-12)


def test_carry_keeps_unscaled_dims_and_the_order_of_the_factors() -> None:
    from longrope_opt import RopeScaling

    carry = _load("carry", ROOT / "bench" / "carry_winners.py").carry
    found = RopeScaling(np.array([1.0, 1.3, 2.0, 4.0, 4.5, 7.9]), 4, 1.09)
    carried = carry(found, 4, 8, "c")
    assert carried.factors[0] == 1.0 and carried.n_hat == 4 and carried.method == "c"
    assert np.all(np.diff(carried.factors) > 0)  # monotone stays monotone
    assert carried.factors[3] == pytest.approx(8.0)  # λ = s becomes s'
    assert carried.attention_scale == pytest.approx(np.sqrt(1 + (1.09**2 - 1) * 1.5))


def test_carry_bench_measures_a_winner_at_the_new_scale_and_resumes(
    tiny_model_dir: str, tmp_path: Path
) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=5, words=600)
    x4, x8 = tmp_path / "x4", tmp_path / "x8"
    script = [sys.executable, str(ROOT / "studies" / "extend_4x_smollm2.py"), "--model",
              tiny_model_dir, "--corpus", corpus, "--dtype", "float32", "--keys", "0",
              "--held-out", "1"]  # fmt: skip
    search = script + ["--target-length", "256", "--trials", "4", "--rerank", "1",
                       "--rerank-samples", "1", "--studies", "new", "--out", str(x4)]  # fmt: skip
    classic = script + ["--target-length", "512", "--stage", "classic", "--methods", "yarn-cd",
                        "--out", str(x8)]  # fmt: skip
    for cmd in (search, classic):
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    bench = [sys.executable, str(ROOT / "bench" / "carry_winners.py"), "--from", str(x4),
             "--from-length", "256", "--out", str(x8), "--target-length", "512", "--model",
             tiny_model_dir, "--corpus", corpus, "--dtype", "float32"]  # fmt: skip
    done = subprocess.run(bench, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    raw = json.loads(x8.with_suffix(".json").read_text())
    assert set(raw) == {"yarn-cd", "new-carried"}  # the table's row is kept
    row = raw["new-carried"]
    assert row["docs"] == raw["yarn-cd"]["docs"] and len(row["ppl"]) == 1  # the same window
    assert row["compute"] == {"ppl": "float32"} and row["identity"]["from"] == 256
    assert "new-carried" in x8.with_suffix(".txt").read_text()
    again = subprocess.run(bench, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and "new-carried: measured already" in again.stdout
    assert json.loads(x8.with_suffix(".json").read_text()) == raw
    for extra, message in (
        (["--studies", "floor"], "--studies: no re-ranked winner of ['floor']"),
        (["--studies", "best"], "--studies must name some of"),
        (["--target-length", str(TINY_LENGTH)], "--target-length must be above the model's"),
        (["--from-length", str(TINY_LENGTH)], "--from-length must be above the model's"),
        (["--out", str(tmp_path / "nope")], "--out: no table at"),
        (["--held-out", "0"], "--held-out must be an integer >= 1, got 0"),
    ):
        bad = subprocess.run(bench + extra, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr[-500:])
        assert "Traceback" not in bad.stderr


def test_a_row_carried_again_on_another_machine_is_the_same_row() -> None:
    same_row = _load("carry", ROOT / "bench" / "carry_winners.py").same_row
    row = {"factors": [1.0, 2.181015465330515, 22.6], "n_hat": 4, "t": 1.13, "from": 32768}
    drift = {**row, "factors": [1.0, 2.1810154653305154, 22.6]}  # the last bit of a power
    assert drift != row and same_row(row, drift)
    for other in ({**row, "factors": [1.0, 2.19, 22.6]}, {**row, "t": 1.14}, {**row, "n_hat": 0},
                  {**row, "from": 16384}, {**row, "factors": [1.0, 22.6]}, {}):  # fmt: skip
        assert not same_row(row, other), other
