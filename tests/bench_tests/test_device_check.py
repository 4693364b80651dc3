"""The device check's parts on the CPU with tiny models: what they print and record, and the 8B
part's way down to the longest length that fits when one runs out of GPU memory."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path

import optuna
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


@pytest.mark.parametrize("runs, only, want", [
    ("a", "speed", ["speed"]), ("b", "speed", ["b"]), ("b,a", "speed,8b", ["b", "speed", "8b"]),
    ("c", "speed", ["c"]), ("correctness,b,speed", "8b", ["correctness", "b", "speed"]),
])  # fmt: skip
def test_runs_and_parts_choose_what_runs(runs, only, want, tmp_path, monkeypatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(check, "prepare", lambda report: (None, {"results": {}}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a simulated GPU")
    monkeypatch.setattr(check, "correctness", lambda report, ref: called.append("correctness"))
    monkeypatch.setattr(check, "speed", lambda report: called.append("speed"))
    monkeypatch.setattr(check, "big_model", lambda report: called.append("8b"))
    monkeypatch.setattr(check, "run_b", lambda report, root, budgets, lengths, held_out,
                        deadline: called.append("b"))  # fmt: skip
    monkeypatch.setattr(check, "run_c", lambda report, root, held_out, deadline:
                        called.append("c"))  # fmt: skip
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--runs", runs,
                                     "--only", only])  # fmt: skip
    assert check.main() == 0
    assert called == want


def test_no_part_starts_after_stop_after(tmp_path, monkeypatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(check, "prepare", lambda report: (None, {"results": {}}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a simulated GPU")
    monkeypatch.setattr(check, "PACK_S", 0.5)

    def slow_b(report, root, budgets, lengths, held_out, deadline) -> None:
        called.append("b")
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.05)  # uses up the call

    monkeypatch.setattr(check, "run_b", slow_b)
    monkeypatch.setattr(check, "speed", lambda report: called.append("speed"))
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--runs", "b,a",
                                     "--only", "speed", "--stop-after", "1"])  # fmt: skip
    assert check.main() == 1
    assert called == ["b"]
    assert "FAIL  speed ran" in (tmp_path / "table.txt").read_text()


def test_a_command_past_the_deadline_is_interrupted_and_ends_cleanly(tmp_path) -> None:
    """SIGINT first, so that Optuna fails the running trial and the study stays resumable."""
    from bench.device import searches

    report = check.Report(tmp_path)
    script = ("import time, pathlib\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
              f"    pathlib.Path({str(tmp_path / 'ended')!r}).write_text('cleanly')\n    raise")
    start = time.monotonic()
    # as when the kit runs in a background job of a non-interactive shell: SIGINT ignored here,
    # which a child would inherit (and then hear no Ctrl-C) unless the stop restores it
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ok = searches._run(report, "sleeper", [sys.executable, "-c", script], tmp_path / "log",
                           tmp_path, deadline=time.monotonic() + 2)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, before)
    assert not ok and time.monotonic() - start < 30
    assert (tmp_path / "ended").read_text() == "cleanly"
    assert "stopped at --stop-after" in (tmp_path / "table.txt").read_text()
    late = searches._run(report, "late", [sys.executable, "-c", "pass"], tmp_path / "log",
                         tmp_path, deadline=time.monotonic() - 1)  # fmt: skip
    assert not late and "late" in (tmp_path / "table.txt").read_text().splitlines()[-1]


def test_an_unknown_part_is_one_line_before_anything_loads(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(check, "prepare", lambda report: pytest.fail("loaded before checking"))
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--only", "speed,9b"])
    with pytest.raises(SystemExit) as exit_:
        check.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("got 'speed,9b'")


def test_run_b_validates_on_the_carried_text_only_when_there_is_some(tmp_path) -> None:
    from bench.device.searches import run_b_commands
    from longrope_opt.cli import build_parser

    plain = run_b_commands(32768, "90s", tmp_path, None)[0]
    held = run_b_commands(32768, "90s", tmp_path, tmp_path / "prose")[0]
    assert "--held-out" not in plain
    assert held[held.index("--held-out") + 1] == str(tmp_path / "prose")
    # Both are commands `longrope-opt` accepts, as the device will run them.
    args = build_parser().parse_args(held[3:])
    assert args.held_out == str(tmp_path / "prose") and args.device == "cuda"


def test_run_b_three_ratios_four_x_first_each_command_parsed_by_the_cli(tmp_path) -> None:
    from bench.device.searches import B_BUDGETS
    from bench.device.searches import B_LENGTHS
    from bench.device.searches import CLASSIC
    from bench.device.searches import run_b_commands
    from longrope_opt.cli import build_parser

    assert B_LENGTHS == (32768, 65536, 131072)  # 4x first: a cut-off run keeps whole ratios
    parser = build_parser()
    for length, budget in zip(B_LENGTHS, B_BUDGETS):
        extend, validate = run_b_commands(length, budget, tmp_path, tmp_path / "prose")
        e = parser.parse_args(extend[3:])
        assert (e.target_length, e.budget, e.study_name) == (str(length), budget,
                                                             f"extend-{length // 8192}x")  # fmt: skip
        v = parser.parse_args(validate[3:])
        # from 8x the search reads the books too (the built-in corpus lacks 64k documents) and
        # the validation the books it did not read
        books = length >= 65536
        assert e.corpus == (f"builtin,{tmp_path / 'prose'}" if books else "builtin")
        assert v.classic == CLASSIC and v.docs == {32768: 5, 65536: 3, 131072: 2}[length]
        assert v.keys == 20
        assert v.lengths == str(length) and v.corpus == str(tmp_path / "prose")
        assert v.study_name == [e.study_name] and v.storage == e.storage


def test_run_c_fine_tunes_both_alike_and_validates_at_32k_and_64k(tmp_path) -> None:
    from bench.device.searches import run_c_commands
    from longrope_opt.cli import build_parser

    parser = build_parser()
    commands = [parser.parse_args(c[3:]) for c in run_c_commands(tmp_path, tmp_path / "prose")]
    searched, yarn_cd = commands[:2]
    assert searched.command == yarn_cd.command == "finetune"
    for field in ("steps", "samples", "target_length", "seed", "corpus"):
        assert getattr(searched, field) == getattr(yarn_cd, field), field
    assert searched.factors == "experiments/results/shipped-4x.json"  # no run B study here
    assert yarn_cd.method == "yarn-cd" and yarn_cd.factors is None  # the formula, by name
    checks = commands[2:-1]
    assert [c.command for c in checks] == ["eval", "eval", "validate"] * 2
    assert {c.lengths for c in checks} == {"32768", "65536"}
    paired = commands[-1]  # both fine-tuned models on the same documents and prompts
    assert paired.command == "validate" and paired.lengths == "32768"
    assert paired.models == [str(tmp_path / "ft-searched"), str(tmp_path / "ft-yarn-cd")]
    (tmp_path / "extend-4x.db").write_bytes(b"")  # after run B: its study's winner
    again = parser.parse_args(run_c_commands(tmp_path, None)[0][3:])
    assert again.study_name == "extend-4x" and again.factors is None


def test_run_g_searches_gemma_on_code_and_validates_on_every_book_it_did_not_read(tmp_path) -> None:
    from bench.device import pack
    from bench.device.searches import CLASSIC
    from bench.device.searches import G_DOCS
    from bench.device.searches import G_LENGTH
    from bench.device.searches import run_g_commands
    from longrope_opt.cli import build_parser

    parser = build_parser()
    search, validate = (parser.parse_args(c[3:]) for c in run_g_commands(tmp_path, tmp_path / "p"))
    assert search.command == "search" and validate.command == "validate"
    assert (search.model, search.target_length) == ("gemma3-270m", G_LENGTH)
    assert G_LENGTH == 8 * 32768 and search.device == validate.device == "cuda"
    # the search reads the built-in code only: every carried book is left for the validation
    assert search.corpus == "builtin" and search.timeout is not None
    assert validate.corpus == str(tmp_path / "p") and validate.docs == G_DOCS == 3
    assert validate.classic == CLASSIC and validate.keys == 20 and validate.lengths == str(G_LENGTH)
    assert validate.study_name == [search.study_name] and validate.storage == search.storage
    # pack.py runs alone (no package on its path) and states run G's numbers itself
    assert (pack.GEMMA_LENGTH, pack.GEMMA_DOCS) == (G_LENGTH, G_DOCS)


def test_run_g_without_books_is_a_failed_check_and_runs_nothing(tmp_path, monkeypatch) -> None:
    from bench.device import searches

    monkeypatch.setattr(searches, "_run", lambda *a, **k: pytest.fail("ran a command"))
    report = check.Report(tmp_path)
    searches.run_g(report, tmp_path, None, work=tmp_path / "w")
    assert report.failed == 1 and not (tmp_path / "w").exists()


def test_run_g_needs_the_gemma_gguf_staged_before_cuda(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LONGROPE_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(check, "prepare", lambda report: (None, {}))
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path / "o"), "--runs", "g"])
    assert check.main() == 1
    out = capsys.readouterr().out
    assert "gemma3-270m staged" in out and "pack the kit with --gemma" in out
    assert "no CUDA" not in out


def test_run_c_writes_the_yarn_cd_factors_it_fine_tunes_with(tmp_path) -> None:
    from bench.device.searches import write_yarn_cd
    from longrope_opt.studies import load_factors

    path = write_yarn_cd(tmp_path / "yarn-cd-4x.json")
    scaling = load_factors(path)
    assert scaling.factors.size == 32 and scaling.factors.max() == pytest.approx(4.0)


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


def _popen_timed_from_first_trial(db: Path, cap_s: float = 900.0) -> type:
    """`subprocess.Popen` whose first timed `wait` starts its clock once `db` holds a trial."""
    import sqlite3
    import subprocess

    class Popen(subprocess.Popen):
        started = False

        def wait(self, timeout=None):
            if timeout is not None and not self.started:
                self.started = True
                give_up = time.monotonic() + cap_s
                while self.poll() is None and time.monotonic() < give_up and not _has_trial(db):
                    time.sleep(0.5)
            return super().wait(timeout=timeout)

    def _has_trial(path: Path) -> bool:
        if not path.is_file():
            return False
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=5)) as con:
                return con.execute("select count(*) from trials").fetchone()[0] > 0
        except sqlite3.OperationalError:  # not created yet, or locked by the writer
            return False

    return Popen


@pytest.mark.slow
def test_run_b_rehearsed_on_the_cpu_brings_back_each_ratio_whole(tmp_path, monkeypatch) -> None:
    """Run B's own commands, end to end, on a tiny model: extend with the held-out text, the
    all-rows validate of its winner, each ratio packed with its study; a ratio stopped at the
    deadline still brings its study back, no trial left running (the same command resumes it)."""
    import tarfile

    from bench.device import searches
    from tests.conftest import write_tiny_corpus

    model = save_tiny_model_dir(tmp_path / "model")
    corpus = write_tiny_corpus(tmp_path / "search-text", n_docs=10, words=1200)
    held = Path(write_tiny_corpus(tmp_path / "held", n_docs=6, words=1200, seed=1))
    target = searches.Target(model=model, device="cpu", trained=64,
                             extra=("--dtype", "float32", "--corpus", corpus))  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    report = check.Report(out)
    searches.run_b(report, check.ROOT, ["15s"], [128], held, target=target, work=tmp_path / "work")
    table = (out / "table.txt").read_text()
    assert "FAIL" not in table, table + (out / "extend-2x.log").read_text()[-3000:]
    with tarfile.open(out / "extend-2x.tar.gz") as tar:
        names = tar.getnames()
    assert "extend-2x.db" in names and "out-2x/all-rows.txt" in names, names
    assert "PASS  run B validate 2x (every classic row)" in table
    for row in ("none", "pi", "ntk", "yarn", "yarn-cd", "ntk-cd"):  # every classic row measured
        assert any(line.split()[:1] == [row] for line in table.splitlines()), row
    # Stopped at the deadline: interrupted, its study packed anyway, resumed by the same command.
    # The deadline counts from the search's first trial, not from the start: on a loaded machine
    # loading torch and the model alone can take longer than any fixed allowance.
    late = check.Report(tmp_path / "late")
    (tmp_path / "late").mkdir()
    monkeypatch.setattr(searches.subprocess, "Popen",
                        _popen_timed_from_first_trial(tmp_path / "work" / "extend-4x.db"))
    searches.run_b(late, check.ROOT, ["1h"], [256], held, deadline=time.monotonic() + 10,
                   target=target, work=tmp_path / "work")  # fmt: skip
    stopped = (tmp_path / "late" / "table.txt").read_text()
    assert "stopped at --stop-after" in stopped, stopped + (
        tmp_path / "late" / "extend-4x.log").read_text()[-3000:]
    with tarfile.open(tmp_path / "late" / "extend-4x.tar.gz") as tar:
        assert "extend-4x.db" in tar.getnames()
    extend, _ = searches.run_b_commands(256, "1h", tmp_path / "work", held, target)
    stored = optuna.load_study(study_name="extend-4x", storage=extend[extend.index("--storage") + 1])
    assert not [t for t in stored.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_windows_held_counts_tokens_of_the_text_as_carried(tmp_path) -> None:
    from bench.device.pack import windows_held

    (tmp_path / "long.txt").write_text("x\n" * 70_000)  # 140,000 characters
    (tmp_path / "short.txt").write_text("x\n" * 20_000)
    held = windows_held(tmp_path, 140_000, count=len)  # one token per character
    assert held == {32768: 2, 65536: 1, 131072: 1}
    assert windows_held(tmp_path, 100_000, count=len) == {32768: 2, 65536: 1, 131072: 0}  # cut
