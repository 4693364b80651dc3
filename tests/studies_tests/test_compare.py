"""`longrope-opt compare` end to end on a tiny model: runs, resumes, and only reads when done."""

from __future__ import annotations

import math
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import longrope_opt.models
import longrope_opt.studies._compare
import longrope_opt.studies._pipeline
from longrope_opt.cli import main
from longrope_opt.studies._compare import comparison_study_name
from longrope_opt.studies._compare_report import SamplerSummary
from longrope_opt.studies._compare_report import SeedRun
from longrope_opt.studies._compare_report import format_table
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)
SAMPLERS = ["longrope", "evolution", "ngopt", "tpe", "cmaes", "random"]


def _args(model: str, corpus: str, storage: str, html: str, budget: int, *extra: str) -> list[str]:
    return [
        "compare",
        "--model", model,
        "--corpus", corpus,
        "--target-length", "256",
        "--samples", "3",
        "--skip-tokens", "32",
        "--budget", str(budget),
        "--seeds", "2",
        "--samplers", ",".join(SAMPLERS),
        "--population-size", "4",
        "--num-mutations", "2",
        "--num-crossovers", "2",
        "--num-parents", "2",
        "--storage", storage,
        "--study-prefix", "cmp",
        "--html", html,
        "--dtype", "float32",
        "--no-fuse",
        *extra,
    ]  # fmt: skip


def _snapshot(storage: str) -> dict[str, list[tuple]]:
    out = {}
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        out[summary.study_name] = [
            (t.number, t.state, t.value, t.datetime_complete) for t in study.get_trials()
        ]
    return out


def test_compare_runs_resumes_and_then_only_reads(
    tiny_model_dir, tmp_path, capsys, monkeypatch
) -> None:
    tiny_corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=6, words=80)
    storage = f"sqlite:///{tmp_path / 'cmp.db'}"
    html = str(tmp_path / "cmp.html")
    assert main(_args(str(tiny_model_dir), str(tiny_corpus), storage, html, 4)) == 0
    # A larger budget resumes the same studies (their first trials are kept as they were).
    first = _snapshot(storage)
    assert main(_args(str(tiny_model_dir), str(tiny_corpus), storage, html, 6)) == 0
    second = _snapshot(storage)
    assert set(second) == {
        comparison_study_name("cmp", s, seed) for s in SAMPLERS for seed in (0, 1)
    }
    for name, trials in first.items():
        done = [t for t in trials if t[1] in (TrialState.COMPLETE, TrialState.PRUNED)]
        assert [t for t in second[name] if t[0] in {d[0] for d in done}] == done
        finished = [t for t in second[name] if t[1] in (TrialState.COMPLETE, TrialState.PRUNED)]
        assert len(finished) >= 6
    # The plain evolution is never seeded with PI/NTK/YaRN; the LongRoPE sampler is.
    plain = optuna.load_study(study_name="cmp/evolution/seed0", storage=storage)
    ours = optuna.load_study(study_name="cmp/longrope/seed0", storage=storage)
    assert not any(t.user_attrs.get("seed") for t in plain.trials)
    assert {t.user_attrs.get("seed") for t in ours.trials} >= {"pi", "ntk", "yarn"}
    # Every trial of every sampler stayed in the bounds; evaluated tokens are recorded.
    for name in second:
        study = optuna.load_study(study_name=name, storage=storage)
        for t in study.get_trials(states=(TrialState.COMPLETE,)):
            lams = [v for k, v in t.params.items() if k.startswith("lambda_")]
            assert lams and all(1.0 <= v <= 1.25 * 256 / 64 + 1e-9 for v in lams)
            assert t.user_attrs["evaluated_tokens"] > 0
    capsys.readouterr()

    # Finished: nothing loads, nothing changes, the same table comes out.
    def no_model(*args, **kwargs):
        raise AssertionError("compare on finished studies must not load a model")

    monkeypatch.setattr(longrope_opt.models, "load_model", no_model)
    html2 = str(tmp_path / "again.html")
    assert main(_args(str(tiny_model_dir), str(tiny_corpus), storage, html2, 6)) == 0
    out = capsys.readouterr().out
    assert _snapshot(storage) == second
    for sampler in SAMPLERS:
        assert any(line.startswith(sampler) for line in out.splitlines())
    assert "skip perplexity (proxy)" in out
    text = Path(html2).read_text()
    assert "plotly" in text and "longrope" in text


@pytest.mark.parametrize("objective", ["perplexity", "needle-ppl"])
def test_a_target_shorter_than_the_default_skip_tokens_runs_and_counts_its_cost(
    tiny_model_dir, tmp_path, capsys, objective
) -> None:
    """Without `--skip-tokens` a 256-token target scores 256 real tokens, not an error about the
    512 default the user never set; both objectives record what a trial cost."""
    corpus = write_tiny_corpus(tmp_path / "corpus")
    args = _args(tiny_model_dir, corpus, f"sqlite:///{tmp_path / 'c.db'}",
                 str(tmp_path / "c.html"), 2, "--objective", objective)  # fmt: skip
    i = args.index("--skip-tokens")
    del args[i : i + 2]
    args[args.index("--samplers") + 1] = "random"
    args[args.index("--seeds") + 1] = "1"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "256 real tokens" in out
    assert "one full evaluation = 0 " not in out
    assert "nan" not in out.split("random", 1)[1].splitlines()[0]


def test_compare_rejects_bad_input(tmp_path, capsys) -> None:
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    base = ["compare", "--storage", storage, "--html", str(tmp_path / "x.html")]
    assert main([*base, "--samplers", "longrope,bogus"]) == 2
    assert "unknown sampler 'bogus' for `--samplers`" in capsys.readouterr().err
    assert main([*base, "--budget", "0"]) == 2
    assert "`--budget` must be >= 1, got 0." in capsys.readouterr().err


@pytest.mark.parametrize(("sampler", "module", "extra"),
                         [("cmaes", "cmaes", "compare"), ("ngopt", "nevergrad", "nevergrad")])
def test_a_sampler_whose_extra_is_missing_is_one_line_before_the_model_loads(
    sampler, module, extra, tmp_path, capsys, monkeypatch
) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else find_spec(name, *a))  # fmt: skip
    for where in (longrope_opt.studies._compare, longrope_opt.studies._pipeline):
        monkeypatch.setattr(where, "load_model",
                            lambda *a, **k: pytest.fail("the model loaded first"))  # fmt: skip
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    for command in (["compare", "--samplers", f"tpe,{sampler}", "--pruner", "none",
                     "--html", str(tmp_path / "x.html")],
                    ["search", "--sampler", sampler, "--n-trials", "2"]):  # fmt: skip
        assert main([*command, "--storage", storage]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"longrope-opt {command[0]}: error: the {sampler} sampler needs {module}: "
                       f"pip install 'longrope-opt[{extra}]'."]  # fmt: skip
    assert optuna.get_all_study_summaries(storage) == []  # nothing written


def test_table_counts_cost_to_reach_the_plain_evolution() -> None:
    # Plain evolution reaches 5.0 after 4 full evaluations; the other sampler reaches it after
    # 1 complete + 1 pruned-at-half = 1.5 full evaluations, and never in its second seed.
    plain = SamplerSummary("evolution", [SeedRun(0, [9, 7, 6, 5], [10, 20, 30, 40])])
    other = SamplerSummary(
        "longrope",
        [SeedRun(0, [6, 6, 5], [10, 15, 25], pruned=1, seed_best=6.0),
         SeedRun(1, [8, 8, 8], [10, 20, 30], seed_best=8.0)],
    )  # fmt: skip
    table = format_table([plain, other], full_tokens=10, budget=4)
    assert "mean best of evolution" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[3:]}
    assert rows["evolution"][5:7] == ["1/1", "4.0"]
    assert rows["evolution"][4] == "—"  # no enqueued seed trials
    assert rows["longrope"][5:7] == ["1/2", ">=2.8"]  # (2.5 + 3.0) / 2, censored
    assert math.isclose(float(rows["longrope"][1]), 6.5)
    assert rows["longrope"][4] == f"{100 * (5 / 6 - 1) / 2:+.2f}%"  # (5/6 - 1 + 8/8 - 1) / 2


def test_table_without_the_plain_evolution_measures_against_the_first_sampler() -> None:
    first = SamplerSummary("longrope-adaptive", [SeedRun(0, [9, 6, 4], [10, 20, 30])])
    second = SamplerSummary("tpe", [SeedRun(0, [8, 5, 4], [10, 20, 30])])
    table = format_table([first, second], full_tokens=10, budget=3)
    assert "mean best of longrope-adaptive at 3 trials: 4.0000" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[3:]}
    assert rows["tpe"][5:7] == ["1/1", "3.0"] and rows["longrope-adaptive"][5:7] == ["1/1", "3.0"]
    # columns stay aligned under a long sampler name: every row's best ends under its header
    head = table.splitlines()[2]
    end = head.index("best (mean ± sd)") + len("best (mean ± sd)")
    for row in table.splitlines()[3:]:
        assert row[end - 1].isdigit() and row[end] == " ", row


@pytest.mark.parametrize("name", ["longrope", "evolution", "ngopt", "tpe", "cmaes", "random"])
def test_every_sampler_is_built_on_the_shared_space(name) -> None:
    from longrope_opt import RopeSpec
    from longrope_opt.samplers import make_sampler
    from longrope_opt.space import SearchSpace

    space = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 256)
    sampler = make_sampler(name, space=space, seed=0, budget=8)
    study = optuna.create_study(sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        scaling = space.suggest(trial)
        assert all(a <= b for a, b in zip(scaling.factors, scaling.factors[1:]))  # repaired
        return float(sum(scaling.factors))

    study.optimize(objective, n_trials=8)
    assert len(study.trials) == 8
    for t in study.trials:  # every proposal inside the box, n_hat from its set
        lams = [t.params[n] for n in space.names]
        assert all(space.lambda_low <= v <= space.lambda_high for v in lams)
        assert t.params.get("n_hat", space.n_hat[0]) in space.n_hat


@pytest.mark.parametrize("space", ["full", "critical"])
def test_seed_all_enqueues_the_same_seeds_for_every_sampler(
    tiny_model_dir, tmp_path, space
) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=8, words=120)
    storage = f"sqlite:///{tmp_path / 'seeded.db'}"
    args = _args(tiny_model_dir, corpus, storage, str(tmp_path / "c.html"), 5, "--seed-all",
                 "--space", space, "--pruner", "none")  # fmt: skip
    args[args.index("--samplers") + 1] = "longrope,evolution,tpe,cmaes,ngopt,random"
    args[args.index("--seeds") + 1] = "1"
    assert main(args) == 0
    seeds_of = {}
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        seeds_of[summary.study_name] = {
            t.user_attrs["seed"]: t.params for t in trials if t.user_attrs.get("seed")
        }
        assert study.user_attrs["longrope_opt:search_config"]["seed_all"] is True
    assert len(seeds_of) == 6
    first = next(iter(seeds_of.values()))
    # the full space: the paper's PI/NTK/YaRN and LongRoPE2's corrected YaRN-cd/NTK-cd; the
    # critical space: its own corrected seeds
    expected = {"full": ["ntk", "ntk-cd", "pi", "yarn", "yarn-cd"],
                "critical": ["ntk-cd", "yarn-cd", "yarn-cd-low"]}[space]  # fmt: skip
    assert sorted(first) == expected
    for seeds in seeds_of.values():
        assert seeds == first  # the same starting points, parameter for parameter


def test_without_seed_all_baselines_start_unseeded(tiny_model_dir, tmp_path) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=8, words=120)
    storage = f"sqlite:///{tmp_path / 'plain.db'}"
    args = _args(tiny_model_dir, corpus, storage, str(tmp_path / "c.html"), 4, "--pruner", "none")
    args[args.index("--samplers") + 1] = "tpe,longrope"
    args[args.index("--seeds") + 1] = "1"
    assert main(args) == 0
    tpe = optuna.load_study(study_name=comparison_study_name("cmp", "tpe", 0), storage=storage)
    evo = optuna.load_study(
        study_name=comparison_study_name("cmp", "longrope", 0), storage=storage
    )
    assert not any(t.user_attrs.get("seed") for t in tpe.trials)
    assert sum(bool(t.user_attrs.get("seed")) for t in evo.trials) == 5  # PI..NTK-cd


def test_a_killed_comparison_resumes_to_its_whole_budget(tiny_model_dir, tmp_path) -> None:
    # What a killed `compare` leaves: a RUNNING trial that beat and then fell silent (here a
    # seed the sampler never saw evaluated). On resume it is failed, its candidate retried, and
    # the study reaches its budget in finished trials; it used to stop short, holding the seed.
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=6, words=80)
    storage = f"sqlite:///{tmp_path / 'killed.db'}"
    args = _args(tiny_model_dir, corpus, storage, str(tmp_path / "c.html"), 2,
                 "--seed-all", "--heartbeat-interval", "1", "--pruner", "none")  # fmt: skip
    args[args.index("--samplers") + 1] = "longrope"
    args[args.index("--seeds") + 1] = "1"
    assert main(args) == 0
    name = comparison_study_name("cmp", "longrope", 0)
    held = optuna.storages.RDBStorage(storage, heartbeat_interval=1)
    study = optuna.load_study(study_name=name, storage=held)
    lost = study.ask()  # the next enqueued seed, taken by the process that is then killed
    assert lost.user_attrs.get("seed")
    held.record_heartbeat(lost._trial_id)
    time.sleep(2.5)  # past the grace period (2 heartbeats)
    args[args.index("--budget") + 1] = "5"  # the 5 seeds: the retry is the last one queued
    assert main(args) == 0
    trials = optuna.load_study(study_name=name, storage=storage).get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 5
    assert trials[lost.number].state == TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == lost.number]
    assert len(retried) == 1 and retried[0].state == TrialState.COMPLETE
    # the seed is measured after all
    assert retried[0].params == trials[lost.number].system_attrs["fixed_params"]
