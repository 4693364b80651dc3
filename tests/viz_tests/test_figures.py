"""Figure builders on synthetic records, and records read from a real (synthetic-objective) study."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from longrope_opt import RopeSpec
from longrope_opt.rope import METHODS
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.space import SearchSpace
from longrope_opt.studies import build_provenance
from longrope_opt.studies import open_study
from longrope_opt.viz import FIGURE_IDS
from longrope_opt.viz import generation_figure
from longrope_opt.viz import generation_records
from longrope_opt.viz import lambda_curve_figure
from longrope_opt.viz import lambda_records
from longrope_opt.viz import length_figure
from longrope_opt.viz import length_records
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


def test_generation_figure_and_length_figure() -> None:
    gens = [
        {"generation": 0, "trials": 4, "completed": 4, "best": 5.0, "best_so_far": 5.0},
        {"generation": 1, "trials": 2, "completed": 1, "best": 6.0, "best_so_far": 5.0},
    ]
    fig = generation_figure(gens)
    assert list(fig.data[0].y) == [5.0, 6.0] and list(fig.data[1].y) == [5.0, 5.0]
    rows = {"none": {8192: 6.0, 16384: math.inf}, "yarn": {16384: 5.2, 8192: 6.0}}
    records = length_records(rows)
    assert records[:1] == [{"method": "none", "length": 8192, "ppl": 6.0}]
    fig = length_figure(records, title="t")
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["none"].x) == [8192]  # inf is left out, not drawn at the top
    assert list(by_name["yarn"].x) == [8192, 16384] and list(by_name["yarn"].y) == [6.0, 5.2]


def _study(tmp_path, n_trials: int = 10) -> optuna.Study:
    space = SearchSpace(SPEC, 256)
    sampler = LongRoPESampler(
        space=space, population_size=4, num_mutations=2, num_crossovers=2, num_parents=2, seed=0
    )
    prov = build_provenance(
        model="tiny", model_type="llama", original_length=64, target_length=256, corpus="c",
        corpus_hash="h", doc_ids=["d"], samples=1, seed=0, objective="synthetic",
    )  # fmt: skip
    study = open_study(
        storage=f"sqlite:///{tmp_path / 'v.db'}", study_name="viz-study", sampler=sampler,
        provenance=prov, spec=SPEC,
    )  # fmt: skip
    target = np.linspace(1.0, 5.0, SPEC.n_factors)
    study.optimize(
        lambda t: float(np.mean((space.suggest(t).factors - target) ** 2)), n_trials=n_trials
    )
    return study


def test_records_from_a_longrope_study(tmp_path) -> None:
    study = _study(tmp_path)
    gens = generation_records(study)
    assert [g["generation"] for g in gens] == [0, 1, 2]
    assert [g["trials"] for g in gens] == [4, 4, 2]  # P = 4, then N1 + N2 = 4 per generation
    assert gens[-1]["best_so_far"] == pytest.approx(study.best_value)
    assert all(a["best_so_far"] >= b["best_so_far"] for a, b in zip(gens, gens[1:]))
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
    assert attach_figures(study) == ["generations", "lambda"]
    assert attach_figures(study) == ["generations", "lambda"]  # re-attaching replaces
    attrs = study._storage.get_study_system_attrs(study._study_id)
    ids = {k.split(":")[2] for k in attrs if k.startswith("dashboard:plot_data:")}
    assert ids == set(FIGURE_IDS.values())  # two figures (stored in pieces), not four


def test_generation_figure_range_follows_the_best_so_far() -> None:
    pytest.importorskip("plotly")
    records = [
        {"generation": 0, "best": 5.20, "best_so_far": 5.20, "completed": 8, "trials": 8},
        {"generation": 1, "best": 19.0, "best_so_far": 5.20, "completed": 8, "trials": 8},
        {"generation": 2, "best": 5.10, "best_so_far": 5.10, "completed": 8, "trials": 8},
    ]
    fig = generation_figure(records)
    lo, hi = fig.layout.yaxis.range
    assert lo < 5.10 < 5.20 < hi < 6  # the 19.0 outlier does not flatten the line
    assert "1 generation best(s) above the range" in fig.layout.annotations[0].text


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
