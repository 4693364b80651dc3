"""`LongRoPESampler`: constraint, de-duplication, reproducibility, state in storage, search quality."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from longrope_opt import RopeSpec
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import ntk
from longrope_opt.rope import pi
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.samplers import enqueue_seeds
from longrope_opt.samplers._state import GENERATION_KEY
from longrope_opt.samplers._state import PARENTS_KEY_PREFIX
from longrope_opt.space import SearchSpace


optuna.logging.set_verbosity(optuna.logging.WARNING)

SMALL = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 256)


def _factors(trial, space: SearchSpace) -> np.ndarray:
    return np.array([trial.params[n] for n in space.names])


def _sampler(space: SearchSpace = SMALL, seed: int = 0, **kw) -> LongRoPESampler:
    kw = {"population_size": 12, "num_mutations": 4, "num_crossovers": 4, "num_parents": 6, **kw}
    return LongRoPESampler(space=space, seed=seed, **kw)


def _quadratic(space: SearchSpace, target: np.ndarray):
    def objective(trial: optuna.Trial) -> float:
        scaling = space.suggest(trial)
        return float(np.mean((scaling.factors - target) ** 2) + 1e-3 * scaling.n_hat)

    return objective


@pytest.mark.parametrize("operators", ["paper", "adaptive"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_candidate_is_monotone_in_bounds_on_grid_and_unique(seed: int, operators) -> None:
    rng = np.random.default_rng(seed)
    target = np.sort(rng.uniform(1.0, 5.0, SMALL.spec.n_factors))
    sampler = _sampler(seed=seed, operators=operators)
    study = optuna.create_study(sampler=sampler)
    enqueue_seeds(study, sampler)
    study.optimize(_quadratic(SMALL, target), n_trials=250)
    keys = set()
    for t in study.trials:
        f = _factors(t, SMALL)
        assert np.all(np.diff(f) >= 0), (t.number, f)
        assert np.all(f >= SMALL.lambda_low) and np.all(f <= SMALL.lambda_high)
        assert t.params["n_hat"] in SMALL.n_hat
        if t.number >= 3:  # the seeds are exact PI/NTK/YaRN values, off the grid on purpose
            np.testing.assert_allclose(f, SMALL.snap(f), atol=1e-9)
        keys.add((tuple(np.round(f, 6)), t.params["n_hat"]))
    assert len(keys) == len(study.trials) == 250
    gens = [t.system_attrs[GENERATION_KEY] for t in study.trials]
    assert gens[:12] == [0] * 12 and gens[12:20] == [1] * 8 and max(gens) > 20


@pytest.mark.parametrize("operators", ["paper", "adaptive"])
def test_same_seed_same_first_100_candidates_and_other_seed_differs(operators) -> None:
    target = np.linspace(1.2, 4.8, SMALL.spec.n_factors)

    def run(seed: int) -> list[tuple]:
        sampler = _sampler(seed=seed, operators=operators)
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        study.optimize(_quadratic(SMALL, target), n_trials=100)
        return [tuple(sorted(t.params.items())) for t in study.trials]

    first = run(7)
    assert run(7) == first
    assert run(8)[3:] != first[3:]


def test_seeds_are_generation_zero_and_can_be_parents() -> None:
    spec = SMALL.spec
    target = pi(spec, 256).factors  # PI is the optimum: the PI seed must be the top parent
    sampler = _sampler()
    study = optuna.create_study(sampler=sampler)
    assert enqueue_seeds(study, sampler) == 3
    assert enqueue_seeds(study, sampler) == 0  # idempotent
    study.optimize(_quadratic(SMALL, target), n_trials=20)
    assert [t.user_attrs.get("seed") for t in study.trials[:3]] == ["pi", "ntk", "yarn"]
    assert all(t.system_attrs[GENERATION_KEY] == 0 for t in study.trials[:12])
    parents = sampler.get_parents(study, 1)
    assert parents[0].user_attrs.get("seed") == "pi"
    stored = study._storage.get_study_system_attrs(study._study_id)[f"{PARENTS_KEY_PREFIX}1"]
    assert stored == [t.number for t in parents]  # trial numbers, not storage ids


def test_pruned_and_failed_trials_never_become_parents() -> None:
    target = np.linspace(1.2, 4.8, SMALL.spec.n_factors)
    base = _quadratic(SMALL, target)

    def objective(trial: optuna.Trial) -> float:
        value = base(trial)
        if trial.number % 3 == 1:
            raise optuna.TrialPruned()
        if trial.number % 3 == 2:
            return float("nan")
        return value

    sampler = _sampler()
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=60)
    bad = {t.number for t in study.trials if t.state != TrialState.COMPLETE}
    for gen in range(1, 5):
        numbers = {t.number for t in sampler.get_parents(study, gen)}
        assert numbers and not (numbers & bad)


def test_a_generation_begun_early_is_bred_from_what_completed_and_stored_once_all_finished() -> None:
    """Parallel workers begin generation 1 while generation 0 still runs: its parents are chosen
    afresh from the trials completed at each ask, never fixed to those (or none) done first."""
    sampler = _sampler(population_size=4, num_mutations=2, num_crossovers=2, num_parents=2)
    study = optuna.create_study(sampler=sampler)
    key = f"{PARENTS_KEY_PREFIX}1"

    def ask() -> optuna.Trial:
        trial = study.ask()
        SMALL.suggest(trial)
        return trial

    def stored() -> dict:
        return study._storage.get_study_system_attrs(study._study_id)

    first = [ask() for _ in range(4)]  # generation 0, all running
    study.tell(first[0], state=TrialState.PRUNED)
    ask()  # generation 1 with nothing of generation 0 complete: bred from no stored parents
    assert key not in stored() and sampler.get_parents(study, 1) == []
    study.tell(first[1], 1.0)
    study.tell(first[2], 0.5)
    ask()
    assert [t.number for t in sampler.get_parents(study, 1)] == [2, 1]
    assert key not in stored()  # trial 3 still runs: not fixed yet
    study.tell(first[3], 0.1)
    ask()
    assert stored()[key] == [3, 2]
    assert [t.number for t in sampler.get_parents(study, 1)] == [3, 2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reaches_known_monotone_optimum_faster_than_random_and_tpe(seed: int) -> None:
    """Monotone-aware evolution vs Optuna samplers searching the raw box (no repair).

    With the shared sort-repair (`repair="sort"`, issue 5's fairness policy) the picture differs
    on this separable objective: TPE with sorting beats the paper's evolution. That comparison
    belongs on the real objective (`compare`), not in a unit test.
    """
    spec = RopeSpec(head_dim=64, base=10000.0, original_length=64)
    space = SearchSpace(spec, 256, n_hat=0, attention="none", repair="none")
    # A plausible optimum between NTK and PI, shifted: no seed is it.
    target = space.snap(0.5 * ntk(spec, 256).factors + 0.5 * pi(spec, 256).factors + 0.3)
    objective = _quadratic(space, target)
    threshold, budget = 0.33, 300

    def trials_to_threshold(sampler: optuna.samplers.BaseSampler, seeds: bool) -> int:
        study = optuna.create_study(sampler=sampler)
        if seeds:
            enqueue_seeds(study, sampler)
        study.optimize(objective, n_trials=budget)
        best = np.minimum.accumulate([t.value for t in study.trials])
        hit = np.flatnonzero(best <= threshold)
        return int(hit[0]) + 1 if hit.size else budget + 1

    ours = trials_to_threshold(
        LongRoPESampler(
            space=space,
            population_size=16,
            num_mutations=8,
            num_crossovers=8,
            num_parents=8,
            seed=seed,
        ),
        seeds=True,
    )
    random = trials_to_threshold(optuna.samplers.RandomSampler(seed=seed), seeds=False)
    tpe = trials_to_threshold(optuna.samplers.TPESampler(seed=seed), seeds=False)
    assert ours <= budget, f"LongRoPE did not reach {threshold} in {budget} trials"
    assert ours < random and ours < tpe, (ours, random, tpe)


def test_new_sampler_on_same_storage_continues_the_search(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'resume.db'}"
    target = np.linspace(1.2, 4.8, SMALL.spec.n_factors)
    first = _sampler(seed=3)
    study = optuna.create_study(study_name="r", storage=storage, sampler=first)
    enqueue_seeds(study, first)
    study.optimize(_quadratic(SMALL, target), n_trials=30)
    gen_before = max(t.system_attrs[GENERATION_KEY] for t in study.trials)
    parents_before = [t.number for t in first.get_parents(study, gen_before)]
    # a fresh process would build a fresh sampler: nothing carried in memory
    second = _sampler(seed=3)
    resumed = optuna.load_study(study_name="r", storage=storage, sampler=second)
    assert enqueue_seeds(resumed, second) == 0
    assert [t.number for t in second.get_parents(resumed, gen_before)] == parents_before
    resumed.optimize(_quadratic(SMALL, target), n_trials=30)
    gens = [t.system_attrs[GENERATION_KEY] for t in resumed.trials]
    assert len(gens) == 60 and gens == sorted(gens) and max(gens) > gen_before


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"population_size": 2}, r"`population_size` must be an integer >= 3, got 2"),
        ({"num_mutations": -1}, r"`num_mutations` must be an integer >= 0, got -1"),
        (
            {"num_mutations": 0, "num_crossovers": 0},
            r"`num_mutations` \+ `num_crossovers` must be >= 1",
        ),
        ({"num_parents": 1}, r"`num_parents` must be >= 2 when crossovers are made, got 1"),
        ({"mutation_prob": 0.0}, r"`mutation_prob` must be in \(0, 1\], got 0.0"),
        ({"mutation_prob": 1.5}, r"`mutation_prob` must be in \(0, 1\], got 1.5"),
        ({"max_tries": 0}, r"`max_tries` must be an integer >= 1, got 0"),
    ],
)
def test_validation(kwargs: dict, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match=pattern):
        LongRoPESampler(space=SMALL, **kwargs)


def test_keyword_only_and_space_type() -> None:
    with pytest.raises(TypeError):
        LongRoPESampler(SMALL)  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match=r"`space` must be an EvolutionSpace; dict lacks \['names', "):
        LongRoPESampler(space={})  # type: ignore[arg-type]


def test_no_seed_draws_one_that_optuna_accepts() -> None:
    from longrope_opt import RopeSpec

    space = SearchSpace(RopeSpec(head_dim=16, base=10000.0, original_length=64), 256)
    seeds = set()
    for _ in range(3):
        sampler = LongRoPESampler(space=space)  # used to raise: Seed must be between 0 and 2**32 - 1
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        study.optimize(lambda t: float(space.suggest(t).factors.sum()), n_trials=5)
        seeds.add(sampler._seed)
        assert 0 <= sampler._seed < 2**32
    assert len(seeds) == 3  # drawn fresh each time


@pytest.mark.parametrize("operators", ["paper", "adaptive"])
def test_a_proposal_reads_only_what_changed(tmp_path, operators) -> None:
    # Finished trials are read and decoded once; a proposal late in a study reads the live
    # trials (one query) and the trials finished since the last proposal, never the whole study.
    sampler = _sampler(operators=operators)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'r.db'}", sampler=sampler)
    enqueue_seeds(study, sampler)
    target = np.linspace(1.2, 4.8, SMALL.spec.n_factors)
    study.optimize(_quadratic(SMALL, target), n_trials=60)
    storage = study._storage
    calls = {"whole": 0, "one": 0}
    get_all, get_one = storage.get_all_trials, storage.get_trial

    def all_trials(study_id, deepcopy=True, states=None):
        if states is None or TrialState.COMPLETE in states:
            calls["whole"] += 1
        return get_all(study_id, deepcopy=deepcopy, states=states)

    def one(trial_id):
        calls["one"] += 1
        return get_one(trial_id)

    storage.get_all_trials, storage.get_trial = all_trials, one
    objective = _quadratic(SMALL, target)
    for _ in range(5):
        before = dict(calls)
        trial = study.ask()
        sampler_reads = dict(calls)
        study.tell(trial, objective(trial))
        assert sampler_reads["whole"] == before["whole"]
        assert sampler_reads["one"] - before["one"] <= 3


@pytest.mark.parametrize("operators", ["surrogate", "paper"])
def test_one_sampler_on_two_studies_proposes_as_a_fresh_one_on_each(operators) -> None:
    # Optuna's samplers may be handed to several studies in turn: what the sampler keeps of
    # one study (ranked trials, decoded genomes by trial number, parents by generation, the
    # trust radius) must never leak into the next
    first, second = np.linspace(1.2, 4.8, 8), np.linspace(3.5, 4.0, 8)

    def run(sampler: LongRoPESampler, target: np.ndarray) -> list[tuple]:
        study = optuna.create_study(sampler=sampler)
        enqueue_seeds(study, sampler)
        study.optimize(_quadratic(SMALL, target), n_trials=60)
        return [tuple(sorted(t.params.items())) for t in study.trials]

    reused = _sampler(seed=3, operators=operators)
    run(reused, first)
    assert run(reused, second) == run(_sampler(seed=3, operators=operators), second)
