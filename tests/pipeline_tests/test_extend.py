"""`longrope-opt extend` on a tiny model: the whole path, what it writes, resuming after SIGKILL
with no stage repeated, and the refusals made before any trial runs."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

from longrope_opt.cli import main
from longrope_opt.evaluation import STORE_STUDY
from longrope_opt.models import load_model
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.pipeline import Plan
from longrope_opt.studies import record
from longrope_opt.studies import study_winner
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)
ROOT = Path(__file__).resolve().parents[2]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("extend")
    return {
        "root": root,
        "model": save_tiny_model_dir(root / "model"),
        "corpus": write_tiny_corpus(root / "corpus", n_docs=10, words=400),
    }


def _args(tiny, name: str, *extra: str) -> list[str]:
    return ["extend", tiny["model"], "--to", "256", "--corpus", tiny["corpus"], "--dtype",
            "float32", "--no-fuse", "--heartbeat-interval", "2", "--storage", f"sqlite:///{tiny['root'] / (name + '.db')}", "--out",
            str(tiny["root"] / name), *extra]  # fmt: skip


def _study(tiny, name: str) -> optuna.Study:
    storage = f"sqlite:///{tiny['root'] / (name + '.db')}"
    (summary,) = [s for s in optuna.get_all_study_summaries(storage)
                  if s.study_name.startswith("extend-")]  # fmt: skip
    return optuna.load_study(study_name=summary.study_name, storage=storage)


@pytest.fixture
def forwards(monkeypatch):
    """Counts model forwards (first decoder layer calls: a full forward, a prompt's continuation
    from a shared prefix), by the stage that ran them."""
    from transformers.models.llama import modeling_llama

    from longrope_opt.studies import _pipeline

    counts: dict[str, int] = {}
    stage = ["(before)"]
    layer_forward = modeling_llama.LlamaDecoderLayer.forward

    def counting(self, *args, **kwargs):
        if self.self_attn.layer_idx == 0:
            counts[stage[0]] = counts.get(stage[0], 0) + 1
        return layer_forward(self, *args, **kwargs)

    real_run_stages = _pipeline.run_stages

    def run_stages(search, stages, **kw):
        for s in stages:
            original = s.run

            def run(search, _original=original, _name=s.name):
                stage[0] = _name
                return _original(search)

            object.__setattr__(s, "run", run)
        return real_run_stages(search, stages, **kw)

    monkeypatch.setattr(modeling_llama.LlamaDecoderLayer, "forward", counting)
    monkeypatch.setattr("longrope_opt.pipeline._extend_stages.run_stages", run_stages)
    return counts


def test_extend_writes_a_model_vanilla_transformers_loads_with_the_same_logits(
    tiny, capsys, forwards, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="longrope_opt.objectives")
    assert main(_args(tiny, "full", "--trials", "8")) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].startswith("plan: one 256-token forward takes")
    study = _study(tiny, "full")
    assert len(study.get_trials(states=FINISHED)) == 8
    # the plan's timing forward is the first seed's first document, which its trial then reads
    assert forwards["(before)"] == 1
    assert [r.getMessage() for r in caplog.records if "measured ahead" in r.getMessage()] == [
        "trial 0: its first document was measured ahead (the plan's timing)"
    ]
    assert study.trials[0].user_attrs["seed"] == "yarn"
    folder = tiny["root"] / "full"
    for name in ("model/config.json", "factors.json", "validation.txt", "validation.csv",
                 "report.html"):  # fmt: skip
        assert (folder / name).is_file(), name
    # vanilla transformers reads the exported directory and computes what the search measured
    from transformers import AutoModelForCausalLM

    vanilla = AutoModelForCausalLM.from_pretrained(folder / "model", attn_implementation="eager")
    ours, _ = load_model(tiny["model"], dtype="float32", attn="eager")
    ids = torch.randint(3, 128, (1, 200), generator=torch.Generator().manual_seed(0))
    winner = study_winner(study)
    assert winner.scaling.n_hat == 0
    with torch.inference_mode(), apply_rope_scaling(ours, winner.scaling):
        expected = ours(ids).logits
    with torch.inference_mode():
        got = vanilla.eval()(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    saved = json.loads((folder / "factors.json").read_text())
    assert saved["trial"] == winner.trial.number
    # the summary: the verdict first, where the model is, the line that loads it
    verdict = next(i for i, line in enumerate(lines) if "against yarn-cd" in line or
                   line.startswith("dominates"))  # fmt: skip
    assert "load it: AutoModelForCausalLM.from_pretrained(" in lines[-1]
    assert verdict < len(lines) - 1
    # everything done: the same command says so in one line (and the load line), loads no
    # model, measures nothing and rewrites nothing
    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    forwards.clear()
    start = time.perf_counter()
    assert main(_args(tiny, "full", "--trials", "8")) == 0
    seconds = time.perf_counter() - start
    again = capsys.readouterr().out.strip().splitlines()
    assert len(again) == 2 and again[0].startswith("nothing left to measure: study 'extend-")
    assert again[1] == lines[-1]  # the same load line
    assert sum(forwards.values()) == 0, forwards
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == stamps
    assert seconds < 30, seconds  # a generous bound: no model load, no forward
    # a file removed since: the stages run again (each skipping what is stored) and rewrite it
    (folder / "validation.txt").unlink()
    assert main(_args(tiny, "full", "--trials", "8")) == 0
    assert "resumed: the plan stored in the study" in capsys.readouterr().out
    assert (folder / "validation.txt").is_file()
    assert sum(forwards.values()) == 0, forwards


def test_a_verdict_that_is_not_dominates_exports_the_classic_row_too(tiny, capsys) -> None:
    assert main(_args(tiny, "classic", "--trials", "6")) == 0
    out = capsys.readouterr().out
    folder = tiny["root"] / "classic"
    table = (folder / "validation.txt").read_text()
    verdict = [line for line in table.splitlines() if line.startswith("verdict ")][0]
    if ": dominates" in verdict:  # pragma: no cover - a random tiny model rarely gets there
        pytest.skip("the tiny search dominated; nothing to fall back to")
    assert "margin m = 1.0% on the ratio" in table
    summary = out[out.index("\n\n") + 2:].splitlines()  # after the plan
    if ": equivalent" in verdict:  # the tiny model's rows are all within 1 % of each other
        assert summary[0].startswith("equivalent to yarn-cd:") and "ship yarn-cd" in summary[0]
    else:
        assert "does not beat the formula" in summary[0] and "yarn-cd is exported too" in summary[0]
    assert (folder / "factors-yarn-cd.json").is_file() and (folder / "model-yarn-cd").is_dir()
    assert summary[-1] == f"load it: AutoModelForCausalLM.from_pretrained({str(folder / 'model-yarn-cd')!r})"
    assert json.loads((folder / "factors-yarn-cd.json").read_text())["method"] == "yarn-cd"


def _spawn(tiny, name: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "longrope_opt.cli", *_args(tiny, name, *extra)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


#: `longrope-opt` that SIGKILLs itself inside a trial (at its first per-document report) once
#: the study holds 3 finished trials: where the kill lands does not depend on how busy the
#: machine is (a tiny trial takes a fraction of a second; a poll from outside can miss it).
KILLED_AFTER_3 = """
import os, signal, sys
import optuna
from optuna.trial import TrialState

report = optuna.trial.Trial.report

def killing_report(self, value, step):
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    if sum(t.state in states for t in self.study.get_trials(deepcopy=False)) >= 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return report(self, value, step)

optuna.trial.Trial.report = killing_report
from longrope_opt.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_killed_inside_the_search_the_rerun_repeats_nothing(tiny, forwards, capfd) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_3, *_args(tiny, "kill-search", "--trials", "7")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    study = _study(tiny, "kill-search")
    before = {t.number: t.datetime_complete for t in study.trials if t.state in FINISHED}
    assert len(before) == 3 and any(t.state == TrialState.RUNNING for t in study.trials)
    forwards.clear()
    capfd.readouterr()
    assert main(_args(tiny, "kill-search", "--trials", "7")) == 0
    printed = capfd.readouterr()
    # the plan for what is left, and an overall bar that starts where the kill stopped it
    plan = printed.out.split("\n\n")[0].splitlines()
    assert plan[0].startswith("plan, resumed: what is left:"), plan
    assert plan[1].startswith("  search    4 of 7 trials") and "left (3 done)" in plan[1], plan
    stored = Plan.from_dict(record.read_plan(_study(tiny, "kill-search")))
    # resumed on the machine it began on: its timing is this machine's
    assert stored.machine and plan[0].endswith(" s here"), plan[0]
    done = dataclasses.replace(stored, finished=3).done_forwards()
    bars = re.findall(r"extend: +\d+%\|[^|]*\| ([\d.]+)/([\d.]+) fwd", printed.err)
    assert bars and float(bars[0][0]) == round(done, 1) > 0, bars[:2]
    assert float(bars[-1][0]) == float(bars[-1][1])  # and ends at the whole plan
    study = _study(tiny, "kill-search")
    assert len(study.get_trials(states=FINISHED)) == 7
    assert len(study.get_trials(states=(TrialState.FAIL,))) <= 1  # the trial the kill stopped
    for t in study.trials:  # the trials finished before the kill were not run again
        if t.number in before:
            assert t.datetime_complete == before[t.number]
    # no timing forward (the plan is stored) and each remaining trial read its documents once
    read = sum(len(t.user_attrs.get("sample_nll", [])) for t in study.trials
               if t.state in FINISHED and t.number not in before)  # fmt: skip
    prompts = len(record.read_retrieval(study).get("misses", {}))
    assert forwards.get("(before)", 0) == 0
    assert forwards["search"] <= read + (prompts + 1) * 4 + 3  # + the killed trial's retry


@pytest.mark.slow
def test_killed_inside_validation_the_rerun_measures_only_what_is_missing(tiny, forwards) -> None:
    proc = _spawn(tiny, "kill-validate", "--trials", "6")
    seen = 0
    for line in proc.stderr:  # one line per stored perplexity measurement
        if "[longrope-opt] validate " in line and ": ppl " in line:
            seen += 1
            if seen == 3:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert seen == 3, "the run ended before its validation"
    storage = f"sqlite:///{tiny['root'] / 'kill-validate.db'}"
    stored = len(optuna.load_study(study_name=STORE_STUDY, storage=storage).user_attrs)
    forwards.clear()
    assert main(_args(tiny, "kill-validate", "--trials", "6")) == 0
    assert forwards.get("search", 0) == 0 and forwards.get("guard", 0) == 0
    total = len(optuna.load_study(study_name=STORE_STUDY, storage=storage).user_attrs)
    assert 0 < forwards["validate"] <= total - stored  # only the measurements not yet stored
    assert forwards.get("export", 0) == 0


def test_a_budget_shorter_than_one_forward_is_refused_before_any_trial(tiny, capfd) -> None:
    assert main(_args(tiny, "tiny-budget", "--budget", "0.001s")) == 2  # a forward takes more
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "shorter than one forward" in lines[0] and "`--budget`" in lines[0]
    # refused before any trial: the study made for it, and the file made for that, are gone
    assert not (tiny["root"] / "tiny-budget.db").exists()


def test_held_out_with_too_few_documents_left_is_refused_before_any_trial(tiny, capfd) -> None:
    few = write_tiny_corpus(tiny["root"] / "few", n_docs=4, words=400)
    args = _args(tiny, "few", "--trials", "4")
    args[args.index("--corpus") + 1] = few  # 3 search documents, 1 left: the validation needs 3
    assert main(args) == 2
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "`--held-out`" in lines[0] and "too few documents" in lines[0]
    assert not (tiny["root"] / "few.db").exists()  # refused before any trial: nothing left


@pytest.mark.parametrize("budget", ["0", "soon", "5x"])
def test_a_bad_budget_is_one_line(tiny, capfd, budget) -> None:
    assert main(_args(tiny, "bad", "--budget", budget)) == 2
    lines = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "`--budget`" in lines[0]


def test_headless_chromium_finds_the_verdict_the_table_and_both_figures(tiny, tmp_path) -> None:
    from tests.viz_tests.test_dashboard_browser import CHROMIUM_FLAGS
    from tests.viz_tests.test_dashboard_browser import _chromium

    assert main(_args(tiny, "report", "--trials", "4")) == 0
    report = tiny["root"] / "report" / "report.html"
    dom = subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
         report.as_uri()],
        capture_output=True, text=True, timeout=180,
    ).stdout  # fmt: skip
    table = (tiny["root"] / "report" / "validation.txt").read_text()
    assert 'id="verdict"' in dom and "yarn-cd" in dom.split('id="verdict"')[1][:400]
    assert 'id="table"' in dom and table.splitlines()[1].split()[0] in dom  # the table's header
    for figure in ("validation-figure", "lambda-figure"):
        part = dom.split(f'id="{figure}"')[1][:200_000]
        assert "main-svg" in part, f"{figure} did not render (plotly draws its svg on load)"
    assert "seed yarn-cd" in dom  # the λ figure's legend: the study's own seeds


def test_auto_measures_passkeys_in_the_branched_form_on_a_cpu_and_a_resume_keeps_it(
    tiny, capsys
) -> None:
    from longrope_opt.studies import SearchConfig

    assert main(_args(tiny, "branched", "--trials", "6", "--passkey-form", "auto")) == 0
    study = _study(tiny, "branched")
    assert SearchConfig.from_study(study).passkey_form == "branched"
    assert record.read_guard(study)["form"] == "branched"
    table = (tiny["root"] / "branched" / "validation.txt").read_text()
    assert "branched form" in table
    capsys.readouterr()
    # the same command resumes the stored study; `single` asked of it is a different search
    assert main(_args(tiny, "branched", "--trials", "6", "--passkey-form", "auto")) == 0
    assert "nothing left to measure" in capsys.readouterr().out
    assert main(_args(tiny, "branched", "--trials", "6", "--passkey-form", "single")) == 2


def test_warm_start_carries_a_shorter_extension_into_the_longer_search(tiny) -> None:
    factors = tiny["root"] / "warm-4x.json"  # what `extend --to 256` writes, minus provenance
    factors.write_text(json.dumps({"factors": [1.0 + 3.0 * i / 7 for i in range(8)],
                                   "n_hat": 0, "attention_scale": 1.1, "target_length": 256}))  # fmt: skip
    args = _args(tiny, "warm-8x", "--trials", "6", "--warm-start", str(factors))
    args[args.index("--to") + 1] = "512"
    args[args.index("--corpus") + 1] = write_tiny_corpus(tiny["root"] / "long", n_docs=8, words=900)
    assert main(args) == 0
    study = _study(tiny, "warm-8x")
    warm = [t for t in study.trials if t.user_attrs.get("warm_start") == 256]
    assert len(warm) == 1 and warm[0].state in FINISHED
