"""The device check's parts on the CPU with tiny models: what they print and record, and the 8B
part's way down to the longest length that fits when one runs out of GPU memory."""

from __future__ import annotations

import json

import pytest
import torch

from bench.device import check
from tests.conftest import save_tiny_model_dir


TINY_SHAPE = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=256, max_position_embeddings=512,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64},
)  # fmt: skip


def test_speed_prints_patched_and_unpatched_rows(tmp_path) -> None:
    report = check.Report(tmp_path)
    model = save_tiny_model_dir(tmp_path / "model")
    check.speed(report, model_name=model, device="cpu", lengths=(128, 256))
    rows = [line.split() for line in report.lines if line.split()[0] in {"128", "256"}]
    assert [r[0] for r in rows] == ["128", "256"] and all(len(r) == 8 for r in rows)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {"speed/128", "speed/256"}
    assert all(s > 0 for r in results.values() for s in (r["patched"][0], r["unpatched"][0]))
    assert (tmp_path / "table.txt").read_text() == "\n".join(report.lines) + "\n"


def test_the_8b_part_goes_down_to_the_longest_length_that_fits(tmp_path, monkeypatch) -> None:
    report = check.Report(tmp_path)
    real = check.timed
    tried: list[int] = []

    def timed(model, ids, scaling):
        tried.append(int(ids.numel()))
        if ids.numel() > 150:  # as if the card held 150 tokens of this model
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, ids, scaling)

    monkeypatch.setattr(check, "timed", timed)
    check.big_model(report, device="cpu", shape=TINY_SHAPE, lengths=(128, 256))
    assert tried == [128, 256, 192, 144]  # down by quarters until one fits
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {"8b/128", "8b/144"}
    assert report.failed == 2  # 256 and 192 did not fit
    assert any(line.startswith("PASS  8B patched forward 144") for line in report.lines)


@pytest.mark.parametrize("runs, only, want", [("a", "speed", ["speed"]), ("b", "speed", ["b"])])
def test_runs_and_parts_choose_what_runs(runs, only, want, tmp_path, monkeypatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(check, "prepare", lambda report: (None, {"results": {}}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a simulated GPU")
    monkeypatch.setattr(check, "speed", lambda report: called.append("speed"))
    monkeypatch.setattr(check, "run_b", lambda report, budget, held_out: called.append("b"))
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--runs", runs,
                                     "--only", only])  # fmt: skip
    assert check.main() == 0
    assert called == want


def test_an_unknown_part_is_one_line_before_anything_loads(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(check, "prepare", lambda report: pytest.fail("loaded before checking"))
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--only", "speed,9b"])
    with pytest.raises(SystemExit) as exit_:
        check.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("got 'speed,9b'")


def test_run_b_validates_on_the_carried_text_only_when_there_is_some(tmp_path) -> None:
    from longrope_opt.cli import build_parser

    plain = check.run_b_command("7m", "sqlite:///x.db", tmp_path / "out", None)
    held = check.run_b_command("7m", "sqlite:///x.db", tmp_path / "out", tmp_path / "prose")
    assert "--held-out" not in plain
    assert held[held.index("--held-out") + 1] == str(tmp_path / "prose")
    # Both are commands `longrope-opt` accepts, as the device will run them.
    args = build_parser().parse_args(held[3:])
    assert args.held_out == str(tmp_path / "prose") and args.device == "cuda"


def test_held_out_without_text_is_one_line_before_anything_loads(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(check, "prepare", lambda report: pytest.fail("loaded before checking"))
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path / "o"), "--runs", "b",
                                     "--held-out", str(tmp_path / "empty")])  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        check.main()
    assert exit_.value.code == 2
    assert "--held-out must be a folder of .txt files" in capsys.readouterr().err


def test_pack_refuses_too_little_held_out_text_before_fetching_anything(tmp_path) -> None:
    import subprocess
    import sys

    for i in range(2):
        (tmp_path / f"book-{i}.txt").write_text("text\n")
    done = subprocess.run(
        [sys.executable, "bench/device/pack.py", "--out", str(tmp_path / "kit"), "--held-out",
         str(tmp_path)],
        cwd=check.ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f"got 2 in {str(tmp_path)!r}")
    assert not (tmp_path / "kit").exists()
