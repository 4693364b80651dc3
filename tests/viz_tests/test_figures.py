"""Figure builders on synthetic records, and records read from a real (synthetic-objective) study."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from longrope_opt import RopeSpec
from longrope_opt.rope import METHODS
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import trial_generation
from longrope_opt.space import SearchSpace
from longrope_opt.studies import build_provenance
from longrope_opt.studies import open_study
from longrope_opt.viz import FIGURE_IDS
from longrope_opt.viz import lambda_curve_figure
from longrope_opt.viz import lambda_records
from longrope_opt.viz import length_figure
from longrope_opt.viz import length_records
from longrope_opt.viz import progress_figure
from longrope_opt.viz import progress_records
from longrope_opt.viz import study_figures


optuna.logging.set_verbosity(optuna.logging.WARNING)
SPEC = RopeSpec(head_dim=16, base=10000.0, original_length=64)


def test_lambda_curve_figure_has_one_trace_per_curve() -> None:
    records = {
        "target_length": 256,
        "curves": {"pi": [4.0] * 8, "best (trial 3)": [1, 2, 3, 4, 5, 6, 7, 8]},
    }
    fig = lambda_curve_figure(records)
    assert [t.name for t in fig.data] == ["pi", "best (trial 3)"]
    assert list(fig.data[1].y) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert list(fig.data[0].x) == list(range(8))
    assert "256" in fig.layout.title.text and fig.layout.yaxis.type == "log"


def test_length_figure() -> None:
    rows = {"none": {8192: 6.0, 16384: math.inf}, "yarn": {16384: 5.2, 8192: 6.0}}
    records = length_records(rows)
    assert records[:1] == [{"method": "none", "length": 8192, "ppl": 6.0}]
    fig = length_figure(records, title="t")
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["none"].x) == [8192]  # inf is left out, not drawn at the top
    assert list(by_name["yarn"].x) == [8192, 16384] and list(by_name["yarn"].y) == [6.0, 5.2]


def _study(tmp_path, n_trials: int = 10, sampler: str = "longrope") -> optuna.Study:
    space = SearchSpace(SPEC, 256)
    if sampler == "nevergrad":
        from longrope_opt.samplers import NevergradSampler

        chosen: optuna.samplers.BaseSampler = NevergradSampler(space=space, budget=n_trials, seed=0)
    else:
        operators = {"paper": {"operators": "paper"}}.get(sampler, {})
        chosen = LongRoPESampler(space=space, population_size=4, num_mutations=2,
                                 num_crossovers=2, num_parents=2, seed=0, **operators)  # fmt: skip
    prov = build_provenance(
        model="tiny", model_type="llama", original_length=64, target_length=256, corpus="c",
        corpus_hash="h", doc_ids=["d"], samples=1, seed=0, objective="synthetic",
    )  # fmt: skip
    study = open_study(
        storage=f"sqlite:///{tmp_path / 'v.db'}", study_name="viz-study", sampler=chosen,
        provenance=prov, spec=SPEC,
    )  # fmt: skip
    if sampler == "nevergrad":  # seeded, as `compare` seeds every sampler
        from longrope_opt.samplers import enqueue_space_seeds

        enqueue_space_seeds(study, space)
    target = np.linspace(1.0, 5.0, SPEC.n_factors)
    study.optimize(
        lambda t: float(np.mean((space.suggest(t).factors - target) ** 2)), n_trials=n_trials
    )
    return study


def test_records_from_a_longrope_study(tmp_path) -> None:
    study = _study(tmp_path)
    lam = lambda_records(study)
    best = f"best (trial {study.best_trial.number})"
    # the study's own seeds, as its trials evaluated them, and the best trial, which ships
    assert set(lam["curves"]) == {"seed pi", "seed ntk", "seed yarn", best}
    assert lam["shipped"] == best
    np.testing.assert_allclose(lam["curves"]["seed yarn"], METHODS["yarn"](SPEC, 256).factors,
                               atol=0.006)  # on the space's 0.01 grid  # fmt: skip
    names = sorted(n for n in study.best_params if n.startswith("lambda_"))
    assert lam["curves"][best] == [study.best_params[n] for n in names]
    assert set(study_figures(study)) == set(FIGURE_IDS)
    # a classic method the study did not seed is drawn when asked
    assert "yarn-cd" not in lam["curves"]


def test_the_lambda_figure_marks_the_winner_the_study_ships(tmp_path) -> None:
    pytest.importorskip("plotly")
    from longrope_opt.studies import record as study_record

    study = _study(tmp_path)
    ranked = sorted((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    second = ranked[1]
    study_record.add_rerank(study, second.number, 0.0)  # the re-rank prefers the second best
    lam = lambda_records(study)
    assert lam["shipped"] == f"shipped: re-ranked (trial {second.number})"
    assert lam["shipped"] in lam["curves"] and f"best (trial {ranked[0].number})" in lam["curves"]
    fig = lambda_curve_figure(lam)
    widths = {tr.name: tr.line.width for tr in fig.data}
    assert widths[lam["shipped"]] == 3 and max(widths.values()) == 3
    assert sum(w == 3 for w in widths.values()) == 1


def test_attach_figures_stores_them_for_the_dashboard(tmp_path) -> None:
    pytest.importorskip("optuna_dashboard")
    from longrope_opt.viz import attach_figures

    study = _study(tmp_path, n_trials=6)
    assert attach_figures(study) == ["lambda", "progress"]
    assert attach_figures(study) == ["lambda", "progress"]  # re-attaching replaces
    attrs = study._storage.get_study_system_attrs(study._study_id)
    ids = {k.split(":")[2] for k in attrs if k.startswith("dashboard:plot_data:")}
    assert ids == set(FIGURE_IDS.values())  # two figures (stored in pieces), not four


@pytest.mark.parametrize("sampler", ["longrope", "paper", "nevergrad"])
def test_the_progress_figure_shows_every_trial_for_every_sampler(tmp_path, sampler) -> None:
    study = _study(tmp_path, n_trials=12, sampler=sampler)
    records = progress_records(study)
    trials = records["trials"]
    assert [r["number"] for r in trials] == list(range(12))  # every trial, not one per generation
    values = [t.value for t in study.trials]
    assert [r["value"] for r in trials] == values
    assert [r["best_so_far"] for r in trials] == [min(values[: i + 1]) for i in range(12)]
    seeds = [r["seed"] for r in trials if r["kind"] == "seed"]
    assert seeds[:3] == ["pi", "ntk", "yarn"]  # every sampler here starts from the seeds
    # generations only where the sampler keeps several (none for nevergrad's)
    tags = {trial_generation(t) for t in study.trials} - {None}
    assert records["generations"] is (len(tags) > 1)
    assert records["generations"] is not (sampler == "nevergrad")
    if sampler == "longrope":  # the default's trust-region steps are marked
        assert any(r["kind"] == "model step" for r in trials)
    fig = progress_figure(records)
    drawn = sorted(n for tr in fig.data if tr.name != "best so far" for n in tr.x)
    assert drawn == list(range(12))
    line = next(tr for tr in fig.data if tr.name == "best so far")
    assert list(line.y) == [r["best_so_far"] for r in trials] and line.line.shape == "hv"
    seed_trace = next(tr for tr in fig.data if tr.name == "seeds")
    assert list(seed_trace.text)[:3] == ["pi", "ntk", "yarn"]
    coloured = [tr for tr in fig.data if tr.marker.colorscale is not None]
    assert bool(coloured) is records["generations"]  # coloured by generation only then


def test_the_progress_figure_counts_pruned_trials_and_keeps_its_range() -> None:
    rows = [
        {"number": 0, "value": 5.2, "best_so_far": 5.2, "kind": "seed", "generation": 0,
         "seed": "yarn", "reports": 1},
        {"number": 1, "value": 19.0, "best_so_far": 5.2, "kind": "candidate", "generation": 0,
         "seed": None, "reports": 1},
        {"number": 2, "value": 5.6, "best_so_far": 5.2, "kind": "pruned", "generation": 0,
         "seed": None, "reports": 1},
        {"number": 3, "value": 5.1, "best_so_far": 5.1, "kind": "candidate", "generation": 0,
         "seed": None, "reports": 3},
    ]  # fmt: skip
    fig = progress_figure({"trials": rows, "generations": False, "maximize": False})
    lo, hi = fig.layout.yaxis.range
    assert lo < 5.1 < 5.6 < hi < 19.0 / 1.5  # the 19.0 outlier does not flatten the rest
    assert "1 trial(s) above the range" in fig.layout.annotations[0].text
    pruned = next(tr for tr in fig.data if tr.name.startswith("pruned"))
    assert list(pruned.x) == [2] and pruned.marker.color == "#999999"


def test_an_empty_passkey_panel_says_why() -> None:
    from longrope_opt.evaluation import summarize
    from longrope_opt.viz import validation_figure
    from tests.evaluation_tests.test_verdicts import _validation

    v = _validation([1.0, 1.01, 0.99, 1.0])
    with_keys = validation_figure(summarize(v).to_dict())
    assert not with_keys.layout.annotations or all(
        "no passkeys" not in (a.text or "") for a in with_keys.layout.annotations
    )
    v.depths[16384] = []
    for row in v.passkey[16384]:
        v.passkey[16384][row] = []
    empty = validation_figure(summarize(v).to_dict())
    assert any("no passkeys measured" in (a.text or "") for a in empty.layout.annotations)
