"""The critical-dimension space (LongRoPE2): shape, params ↔ factors both ways, seeds, every
sampler on it, and a search end to end with the needle objective on a tiny model."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from longrope_opt.cli import main
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import critical_dimension
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers import make_sampler
from longrope_opt.space import SearchSpace
from longrope_opt.studies import record


SMOL = RopeSpec(head_dim=64, base=1e5, original_length=8192)
LLAMA2 = RopeSpec(head_dim=128, base=1e4, original_length=4096)
optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize(("spec", "target"), [(SMOL, 32768), (LLAMA2, 16384), (SMOL, 12000)])
def test_bounds_names_and_distributions(spec: RopeSpec, target: int) -> None:
    space = SearchSpace(spec, target, shape="critical", critical_radius=4)
    c0 = critical_dimension(spec)
    s = spec.scale(target)
    assert space.critical_bounds == (c0 - 4, c0 + 4)
    assert space.low == pytest.approx(s) and space.high == pytest.approx(2 * s)
    assert space.param_names == space.names[c0 - 4 :]
    dists = space.distributions()
    assert dists["critical_dim"].low == c0 - 4 and dists["critical_dim"].high == c0 + 4
    assert all(dists[n].low == pytest.approx(s) for n in space.param_names)


def _random_params(space: SearchSpace, rng: np.random.Generator) -> dict:
    lo, hi = space.critical_bounds
    params = {n: float(rng.uniform(space.low, space.high)) for n in space.param_names}
    params["critical_dim"] = int(rng.integers(lo, hi + 1))
    params["n_hat"] = int(rng.choice(space.n_hat))
    return params


def test_every_trial_is_monotone_with_the_ramp_below_c() -> None:
    space = SearchSpace(SMOL, 32768, shape="critical")
    rng = np.random.default_rng(0)
    for _ in range(200):
        params = _random_params(space, rng)  # unsorted: what a baseline may propose
        c = params["critical_dim"]
        f = space.to_scaling(params).factors
        assert np.all(np.diff(f) >= 0)
        assert f[0] == 1.0 and np.allclose(f[:c], f[c] ** (np.arange(c) / c))
        assert np.all(f[c:] >= space.low - 1e-12) and np.all(f[c:] <= space.high + 1e-12)


def test_params_to_factors_and_back_both_ways() -> None:
    space = SearchSpace(SMOL, 32768, shape="critical", attention="search")
    rng = np.random.default_rng(1)
    for _ in range(50):
        params = _random_params(space, rng)
        params["attention_scale"] = float(rng.uniform(*space.attention_bounds))
        c = params["critical_dim"]
        factors, n_hat, t = space.decode(params)
        again = space.encode(factors, n_hat, t, critical=c)
        # λ from c on and every other parameter come back exactly; λ below c are the ramp
        for i, name in enumerate(space.names):
            if name in space.param_names and i >= c:
                assert again[name] == params[name]
        assert {k: again[k] for k in ("critical_dim", "n_hat", "attention_scale")} == {
            k: params[k] for k in ("critical_dim", "n_hat", "attention_scale")
        }
        # factors → params → factors is exact
        assert np.array_equal(space.decode(again)[0], factors)


def test_seeds_are_corrected_yarn_and_ntk() -> None:
    space = SearchSpace(SMOL, 32768, shape="critical")
    seeds = dict(space.seed_params())
    assert set(seeds) == {"yarn-cd", "ntk-cd", "yarn-cd-low"}
    s, c0 = 4.0, critical_dimension(SMOL)
    yarn = space.to_scaling(seeds["yarn-cd"]).factors
    assert np.allclose(yarn[c0:], s) and np.allclose(yarn[:c0], s ** (np.arange(c0) / c0))
    ntk = space.to_scaling(seeds["ntk-cd"]).factors
    assert np.allclose(ntk, np.minimum(s ** (np.arange(32) / c0), 8.0))
    assert seeds["yarn-cd-low"]["critical_dim"] == space.critical_bounds[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_length": 8192}, "first search past the trained length"),
        ({"critical_radius": -1}, "`critical_radius` must be an integer >= 0"),
        ({"critical_above": -2}, "`critical_above` must be an integer >= 0, got -2"),
        ({"critical_above": 1.5}, "`critical_above` must be an integer >= 0, got 1.5"),
        ({"shape": "diagonal"}, "`shape` must be one of"),
    ],
)
def test_bad_critical_spaces(kwargs, message) -> None:
    args = {"target_length": 32768, "shape": "critical", **kwargs}
    with pytest.raises(InvalidArgumentError, match=message):
        SearchSpace(SMOL, **args)
    with pytest.raises(InvalidArgumentError, match="first search"):
        SearchSpace(
            SMOL, 32768, shape="critical", base=RopeScaling(np.full(32, 2.0)), base_length=16384
        )


def test_critical_above_zero_keeps_every_candidate_at_or_above_yarn_cd() -> None:
    floor = SearchSpace(SMOL, 32768, shape="critical", critical_above=0, attention="search")
    free = SearchSpace(SMOL, 32768, shape="critical", attention="search")
    c0 = critical_dimension(SMOL)
    assert floor.critical_bounds == (c0 - 6, c0) and free.critical_bounds == (c0 - 6, c0 + 6)
    assert SearchSpace(SMOL, 32768, shape="critical", critical_above=2).critical_bounds[1] == c0 + 2
    yarn_cd = floor.to_scaling(dict(floor.seed_params())["yarn-cd"]).factors
    rng = np.random.default_rng(4)
    below = 0
    for _ in range(300):  # unsorted proposals, as a baseline makes them
        params = _random_params(free, rng)
        params["attention_scale"] = 1.0
        below += bool(np.any(free.to_scaling(params).factors < yarn_cd - 1e-9))
        params["critical_dim"] = min(params["critical_dim"], c0)
        assert np.all(floor.to_scaling(params).factors >= yarn_cd - 1e-9)
    assert below > 0  # without the bound, some candidates interpolate less than YaRN-cd
    for operators in ("paper", "adaptive"):  # the evolution's own proposals stay in the bound
        sampler = LongRoPESampler(
            space=floor, seed=0, population_size=8, num_mutations=4, num_crossovers=4,
            num_parents=4, operators=operators,
        )  # fmt: skip
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        study.optimize(lambda t: float(floor.suggest(t).factors.sum()), n_trials=40)
        for t in study.trials:
            assert t.params["critical_dim"] <= c0
            assert np.all(floor.to_scaling(t.params).factors >= yarn_cd - 1e-9)


def test_evolution_candidates_are_monotone_on_grid_unique_and_reproducible() -> None:
    space = SearchSpace(SMOL, 32768, shape="critical")
    target = np.linspace(4.0, 8.0, 32)

    def run(seed: int) -> list:
        sampler = LongRoPESampler(
            space=space, seed=seed, population_size=8, num_mutations=4, num_crossovers=4,
            num_parents=4,
        )  # fmt: skip
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        study.optimize(
            lambda t: float(((space.suggest(t).factors[18:] - target[18:]) ** 2).sum()),
            n_trials=60,
        )
        return study.trials

    trials = run(3)
    keys = set()
    cs = set()
    for t in trials:
        f = space.to_scaling(t.params).factors
        c = t.params["critical_dim"]
        cs.add(c)
        assert np.all(np.diff(f) >= 0) and not space.is_repaired(t.params)
        if "seed" not in t.user_attrs:  # proposals sit on the 0.01 grid from s
            k = (f[c:] - space.low) / space.step
            assert np.allclose(k, np.round(k), atol=1e-6)
        keys.add((tuple(np.round(f, 6)), c, t.params.get("n_hat")))
    assert len(keys) == len(trials)  # no candidate twice
    assert len(cs) > 2  # c is searched
    again = run(3)
    assert [t.params for t in again] == [t.params for t in trials]


@pytest.mark.parametrize("name", ["tpe", "cmaes", "random", "ngopt"])
def test_baselines_search_the_critical_space(name: str) -> None:
    space = SearchSpace(SMOL, 32768, shape="critical")
    sampler = make_sampler(name, space=space, seed=0, budget=12)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(space.suggest(t).factors.sum()), n_trials=12)
    lo, hi = space.critical_bounds
    for t in study.trials:
        assert lo <= t.params["critical_dim"] <= hi
        assert np.all(np.diff(space.to_scaling(t.params).factors) >= 0)


def test_search_with_needle_ppl_in_the_critical_space_end_to_end(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    db = tmp_path / "cd.db"
    args = [
        "search", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--target-length", "256",
        "--samples", "1", "--storage", f"sqlite:///{db}", "--study-name", "cd",
        "--n-trials", "8", "--population-size", "4", "--num-mutations", "2",
        "--num-crossovers", "2", "--num-parents", "2", "--dtype", "float32", "--no-fuse",
        "--space", "critical", "--objective", "needle-ppl",
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "seed YARN-CD" in out
    study = optuna.load_study(study_name="cd", storage=f"sqlite:///{db}")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(complete) + len(pruned) == 8  # the population pruner stops the losers
    assert study.user_attrs["longrope_opt:search_config"]["space"] == "critical"
    assert record.read_objective_record(study)["prompts"] == 4
    assert all(len(t.intermediate_values) == 4 for t in complete)
    assert {t.user_attrs.get("seed") for t in complete} >= {"yarn-cd", "ntk-cd", "yarn-cd-low"}
    # the study exports what it evaluated: monotone factors with the ramp below c
    assert main(["export", "--storage", f"sqlite:///{db}", "--study-name", "cd",
                 "-o", str(tmp_path / "f.json")]) == 0  # fmt: skip
    import json

    exported = json.loads((tmp_path / "f.json").read_text())
    factors = np.array(exported.get("factors") or exported["long_factor"])
    assert np.all(np.diff(factors) >= 0) and factors[0] == pytest.approx(1.0)


def test_critical_above_is_part_of_the_stored_search() -> None:
    from longrope_opt.studies import SearchConfig

    config = SearchConfig(target_length=32768, space="critical", critical_above=0)
    again = SearchConfig.from_dict(config.to_dict())
    assert again == config
    c0 = critical_dimension(SMOL)
    assert again.build_space(SMOL).critical_bounds == (c0 - 6, c0)
    # a study stored before the field existed keeps the range it was searched in
    old = {k: v for k, v in config.to_dict().items() if k != "critical_above"}
    assert SearchConfig.from_dict(old).build_space(SMOL).critical_bounds == (c0 - 6, c0 + 6)
    assert config.first_difference(SearchConfig.from_dict(old)) == ("critical_above", 0, None)


@pytest.mark.parametrize("shape", ["full", "critical"])
@pytest.mark.parametrize("target", [16384, 65536])
def test_a_searched_attention_scale_starts_where_the_fixed_rule_puts_it(
    shape: str, target: int
) -> None:
    # Not on the lower bound of t's range: the seeds of a search over t are the seeds of the
    # space that fixes t by its default rule, evaluated alike, and t lies inside its range.
    searched = SearchSpace(SMOL, target, shape=shape, attention="search")
    fixed = SearchSpace(SMOL, target, shape=shape)
    lo, hi = searched.attention_bounds
    pairs = list(zip(searched.seed_params(), fixed.seed_params(), strict=True))
    assert pairs
    for (name, params), (same, reference) in pairs:
        assert name == same
        t = params["attention_scale"]
        assert lo < t < hi
        assert t == pytest.approx(fixed.fixed_attention_scale)
        assert searched.to_scaling(params) == fixed.to_scaling(reference)


def test_a_searched_attention_scale_starts_inside_narrower_bounds() -> None:
    space = SearchSpace(SMOL, 65536, attention="search", attention_bounds=(1.2, 1.4))
    assert {p["attention_scale"] for _, p in space.seed_params()} == {1.2}
