"""`LongRoPESampler`: the LongRoPE evolutionary search as an Optuna sampler (paper Algorithm 1)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Container
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers import _state
from longrope_opt.samplers._base import SpaceSampler
from longrope_opt.samplers._history import History
from longrope_opt.samplers._index import SeenKeys
from longrope_opt.samplers._index import TrialIndex
from longrope_opt.samplers._operators import Genome
from longrope_opt.samplers._operators import operator_child
from longrope_opt.samplers._operators import random_monotone
from longrope_opt.samplers._options import check_settings
from longrope_opt.samplers._population import direction_sign
from longrope_opt.samplers._population import entering
from longrope_opt.samplers._population import enters
from longrope_opt.samplers._population import rank_key
from longrope_opt.samplers._population import store_constraints
from longrope_opt.samplers._protocol import EvolutionSpace
from longrope_opt.samplers._screen import STEP_KEY
from longrope_opt.samplers._screen import local_size
from longrope_opt.samplers._screen import surrogate_proposal


SEED_METHODS = ("pi", "ntk", "yarn")
#: ``"paper"``: Algorithm 1's operators (each λ re-drawn between its neighbours, uniform
#: crossover). ``"adaptive"``: log-normal steps sized by the parents' spread, then sorted, and
#: a blend crossover (see `longrope_opt.samplers._operators`). ``"surrogate"`` (the default):
#: the adaptive operators screened by a quadratic model of the complete trials, and every third
#: slot a trust-region step of the model's minimum (`longrope_opt.samplers._screen`).
OPERATORS = ("paper", "adaptive", "surrogate")


def _fresh_seed() -> int:
    # 32 bits from the OS entropy pool: Optuna's RandomSampler takes seeds below 2**32.
    return int(np.random.SeedSequence().generate_state(1, dtype=np.uint32)[0])


class LongRoPESampler(SpaceSampler):
    """Evolutionary search over per-frequency RoPE factors λ, n̂ and (optionally) t.

    Generation 0 is the PI, NTK and YaRN seeds (enqueue them with :meth:`seed_params` so they are
    visible trials) plus ``population_size − 3`` mutants of them. Each later generation makes
    `num_mutations` mutants and `num_crossovers` crossovers of the parents: the `num_parents`
    best completed trials among the previous generation and its parents. Every candidate is
    non-decreasing (λ_i ≤ λ_{i+1}), on the space's grid, and not already in the study.

    All state is in the study storage (generation and slot per trial, parents per generation),
    so a new process on the same storage continues the same search and several workers on one
    study cooperate. The randomness of a trial is derived from ``(seed, trial.number)``: a seed
    makes the candidate sequence reproducible, and workers sharing a seed still differ.

    Reference: Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
    ICML 2024, Algorithm 1 and Table 3 (P=64, N1=N2=16, p=0.3, top-k=32).

    Args:
        space: The search space (`EvolutionSpace`: the same `SearchSpace` the objective uses).
        population_size: P, the size of generation 0.
        num_mutations: N1, mutants per later generation.
        num_crossovers: N2, crossovers per later generation.
        num_parents: k, parents kept per generation.
        mutation_prob: p, per-gene re-draw probability.
        max_tries: Attempts to find a new valid candidate before the fallback (a mutation with
            p = 1, then a random monotone vector).
        seeded: Start from PI/NTK/YaRN and their mutants (the paper's initial population). False
            starts from random non-decreasing vectors — a plain GA, the reference point
            `longrope-opt compare` measures seeding against.
        dedup: Never propose a candidate the study already holds. False re-evaluates duplicates,
            as a plain GA would.
        seed: Base seed; None draws one.
        operators: ``"surrogate"`` (default: the adaptive operators screened by a model of the
            trials, with trust-region model steps; `bench/landscape_bench.py` measures it),
            ``"paper"`` (Algorithm 1, the reproducible reference) or ``"adaptive"`` (steps
            sized by the parents' spread, plateaus can move, blend crossover).
        constraints_func: Optuna's convention (as `NSGAIISampler` and `TPESampler`): a
            finished trial → a sequence of floats, each ≤ 0 when satisfied, stored in the
            trial's system attrs under ``"constraints"``. The population ranks feasible trials
            first, infeasible ones by total violation (`longrope_opt.samplers.rank_key`).
    """

    def __init__(
        self,
        *,
        space: EvolutionSpace,
        population_size: int = 64,
        num_mutations: int = 16,
        num_crossovers: int = 16,
        num_parents: int = 32,
        mutation_prob: float = 0.3,
        max_tries: int = 50,
        seeded: bool = True,
        dedup: bool = True,
        seed: int | None = None,
        operators: str = "surrogate",
        constraints_func: Callable[[FrozenTrial], Sequence[float]] | None = None,
    ) -> None:
        if constraints_func is not None and not callable(constraints_func):
            raise InvalidArgumentError(
                f"`constraints_func` must be callable or None, got {constraints_func!r}."
            )
        self.check_options(
            operators=operators,
            population_size=population_size,
            num_mutations=num_mutations,
            num_crossovers=num_crossovers,
            num_parents=num_parents,
            mutation_prob=mutation_prob,
            max_tries=max_tries,
        )
        self._population_size = population_size
        self._num_mutations = num_mutations
        self._num_crossovers = num_crossovers
        self._num_parents = num_parents
        self._mutation_prob = mutation_prob
        self._max_tries = max_tries
        self._operators = operators
        self._constraints_func = constraints_func
        self._index = TrialIndex(self._key_of_finished, on_new_study=self._forget_study)
        self._forget_study()
        self.seeded = bool(seeded)
        self._dedup = bool(dedup)
        self._seed = _fresh_seed() if seed is None else int(seed)
        super().__init__(space=space, seed=self._seed)
        seeds = space.seed_params()
        self._seed_names = [name for name, _ in seeds]
        genomes = [self._genome_of_params(params) for _, params in seeds]
        assert all(g is not None for g in genomes)  # seed params hold every parameter
        self._seed_genomes: list[Genome] = [g for g in genomes if g is not None]

    # ----- public helpers -------------------------------------------------------------------

    @staticmethod
    def check_options(
        *,
        population_size: int = 64,
        num_mutations: int = 16,
        num_crossovers: int = 16,
        num_parents: int = 32,
        mutation_prob: float = 0.3,
        max_tries: int = 50,
        operators: str = "surrogate",
        **unknown: Any,
    ) -> None:
        """Validate the evolution's settings without a space (a search checks them before any
        model loads).

        Raises:
            InvalidArgumentError: An unknown setting, or a value outside its range.
        """
        check_settings(
            population_size=population_size, num_mutations=num_mutations,
            num_crossovers=num_crossovers, num_parents=num_parents, mutation_prob=mutation_prob,
            max_tries=max_tries, operators=operators, operator_names=OPERATORS,
            min_population=len(SEED_METHODS), unknown=unknown,
        )  # fmt: skip

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """``[(method, params)]`` of the seeds (PI, NTK, YaRN, ...: the space's `seed_params`),
        ready for `study.enqueue_trial`."""
        return [(m, self._params_of(g)) for m, g in zip(self._seed_names, self._seed_genomes)]

    def generation_capacity(self, generation: int) -> int:
        """Trials per generation: P for generation 0, N1 + N2 after."""
        return (
            self._population_size
            if generation == 0
            else self._num_mutations + self._num_crossovers
        )

    def get_parents(
        self, study: Study, generation: int, *, refresh: bool = True
    ) -> list[FrozenTrial]:
        """The parents of `generation`: the best completed trials of the generation before and
        of its parents. Stored (then fixed) once every trial of the generation before has
        finished; until then chosen afresh from what has completed at each ask, so a
        generation that parallel workers begin early is not bred for good from the few trials
        (or none) complete when it began.

        Args:
            study: The study.
            generation: The generation whose parents are asked for.
            refresh: Read the study's new trials first; False where the caller has just read
                them (each read costs ≈ 3 ms on SQLite at 2,000 trials).
        """
        if generation == 0:
            return []
        if refresh:
            self._index.refresh(study)
        # Trial numbers are dense and say the generation: the generation before is all done
        # once every trial numbered below this generation's first has finished.
        before = _state.first_number(generation, self.generation_capacity)
        fixed = self._index.finished_below() >= before
        # Once fixed, read back from the storage (one read per generation, not per proposal).
        numbers = self._parents.get(generation)
        if numbers is None and fixed:
            numbers = _state.cached_parents(study, generation)
        if numbers is None:
            pool = {
                t.number: t
                for t in self._index.finished()
                if t.state == TrialState.COMPLETE and _state.trial_generation(t) == generation - 1
            }
            for parent in self.get_parents(study, generation - 1, refresh=False):
                pool.setdefault(parent.number, parent)
            sign, constrained = direction_sign(study), self._constraints_func is not None
            # Complete trials (and earlier parents, which were complete): every value is set.
            ranked = sorted(pool.values(), key=lambda t: rank_key(t, sign, constrained))
            numbers = [t.number for t in ranked[: self._num_parents]]
            if fixed:
                _state.store_parents(study, generation, numbers)
        if fixed:
            self._parents[generation] = numbers
        parents = [self._index.trial(n) for n in numbers]
        return [t for t in parents if t is not None]

    def entry_bar(self, study: Study, trial: FrozenTrial) -> FrozenTrial | None:
        """The member a candidate of `trial`'s generation must beat to enter the population that
        the next generation's parents are chosen from (its parents and its generation's complete
        trials so far), or None while a place is free (`PopulationPruner` and the retrieval
        constraint ask this)."""
        gen = _state.trial_generation(trial)
        if gen is None:
            return None
        self._index.refresh(study)
        members = {
            t.number: t
            for t in self._index.finished()
            if t.state == TrialState.COMPLETE
            and _state.trial_generation(t) == gen
            and t.number != trial.number
        }
        for parent in self.get_parents(study, gen, refresh=False):
            members.setdefault(parent.number, parent)
        constrained = self._constraints_func is not None
        return entering(
            list(members.values()), self._num_parents, direction_sign(study), constrained
        )

    def would_enter(self, study: Study, trial: FrozenTrial, value: float) -> bool:
        """Whether `trial`, if feasible, would enter the population with `value`."""
        return enters(self.entry_bar(study, trial), value, direction_sign(study))

    # ----- optuna.samplers.BaseSampler --------------------------------------------------------

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        if self._constraints_func is not None:
            store_constraints(self._constraints_func, study, trial, state)

    def reseed_rng(self) -> None:
        self._seed = _fresh_seed()
        super().reseed_rng()

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        # An enqueued trial (a seed, or the retry of a stale trial) is evaluated without ever
        # reaching `sample_relative`, so it is tagged here: seeds count in generation 0 and can
        # be parents. Every other trial is tagged when it is sampled, so a trial that never
        # reaches the sampler (one refused by the study's budget) opens no generation.
        if _state.is_enqueued(trial):
            _state.assign(study, trial, self.generation_capacity)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._single_objective_only(study)
        if not search_space:
            return {}
        gen, slot = _state.assign(study, trial, self.generation_capacity)
        rng = np.random.default_rng([self._seed & 0xFFFFFFFF, trial.number])
        if not self._dedup:
            genome, step = self._propose(study, gen, slot, rng, set())
        else:
            genome, step = self._propose_unclaimed(study, trial, gen, slot, rng)
        start = self._step_start.pop(genome.key(), None)
        if step == "model" and start is not None:  # the trust region replays the model steps
            study._storage.set_trial_system_attr(trial._trial_id, STEP_KEY, [step, start])
        params = self._params_of(genome)
        return {name: value for name, value in params.items() if name in search_space}

    # ----- internals ------------------------------------------------------------------------

    def _propose(
        self, study: Study, gen: int, slot: int, rng: np.random.Generator, seen: Container
    ) -> tuple[Genome, str]:
        if not self._dedup:  # with dedup, `_existing_keys` has just read the study
            self._index.refresh(study)
        if self._operators == "surrogate" and (gen > 0 or self.seeded):
            if gen > 0:  # the generation's parents, stored for the population pruner and plots
                self.get_parents(study, gen, refresh=False)
            sign = direction_sign(study)
            history = self._history
            ranked = history.best(sign, self._constraints_func is not None,
                                  local_size(self._space, self._num_parents))  # fmt: skip
            genome, step, start = surrogate_proposal(
                ranked, history.steps, history.genome, self._space, rng, seen, slot=slot,
                sign=sign, num_parents=self._num_parents,
                prob=self._mutation_prob, fallback=self._seed_genomes,
                trust_radius=history.trust_radius,
            )  # fmt: skip
            if genome is not None:
                if start is not None:  # where a model step starts: its success is replayed
                    self._step_start[genome.key()] = start
                return genome, step
        return self._propose_operators(study, gen, slot, rng, seen), ""

    def _propose_operators(
        self, study: Study, gen: int, slot: int, rng: np.random.Generator, seen: Container
    ) -> Genome:
        p = self._mutation_prob
        if gen == 0 and (not self.seeded or (self._operators != "paper" and slot % 2)):
            # adaptive: half of generation 0 explores the whole space, half the seeds' region
            return random_monotone(self._space, rng, len(self._space.names))
        if gen == 0:
            parents = self._seed_genomes
        else:
            stored = self.get_parents(study, gen, refresh=False)  # `_propose` has read the study
            decoded = [self._genome_of_params(t.params) for t in stored]
            fallback = self._seed_genomes if self.seeded else []
            parents = [g for g in decoded if g is not None] or fallback
            if not parents:  # an unseeded search whose previous generation all failed
                return random_monotone(self._space, rng, len(self._space.names))
        return operator_child(
            parents, self._space, rng, seen, gen=gen, slot=slot,
            num_mutations=self._num_mutations, adaptive=self._operators != "paper",
            prob=p, max_tries=self._max_tries,
        )  # fmt: skip

    def _propose_unclaimed(
        self, study: Study, trial: FrozenTrial, gen: int, slot: int, rng: np.random.Generator
    ) -> tuple[Genome, str]:
        # Workers propose concurrently, and a trial's params are written only after the sampler
        # returns. So each proposal is claimed first (a system attr of the trial), then the study
        # is read again: a worker that finds its claim held by another trial proposes again.
        # Write-then-read means of two simultaneous claims at least one sees the other.
        seen = self._existing_keys(study, trial)
        for _ in range(self._max_tries):
            genome, step = self._propose(study, gen, slot, rng, seen)
            claim = _state.claim_key(genome.key())
            study._storage.set_trial_system_attr(trial._trial_id, _state.CLAIM_KEY, claim)
            seen = self._existing_keys(study, trial)
            if genome.key() not in seen:
                return genome, step
        return genome, step  # max_tries collisions in a row: give up avoiding it (never seen)

    def _existing_keys(self, study: Study, trial: FrozenTrial) -> SeenKeys:
        # Finished trials' keys were computed once (`TrialIndex`); only live ones are read again,
        # and the finished ones are not copied (O(study) a proposal) but looked up in place.
        live = self._index.refresh(study)
        keys: set = set()
        for t in live:
            if t.number == trial.number:
                continue
            claim = t.system_attrs.get(_state.CLAIM_KEY)
            if claim is not None and t.state == TrialState.RUNNING:
                keys.add(_state.key_of_claim(claim))
            # An enqueued trial (a seed, a retry) holds its candidate in its fixed params from
            # the moment it is queued; its params appear only as its objective suggests them.
            params = {**t.system_attrs.get(_state.FIXED_PARAMS_KEY, {}), **t.params}
            genome = self._genome_of_params(params)
            if genome is not None:
                keys.add(genome.key())
        return SeenKeys(self._index.values(), keys)

    def _forget_study(self) -> None:
        # What the sampler keeps of one study, keyed by its trial numbers and generations: a
        # sampler handed to another study (Optuna allows it) starts these over.
        self._history = History(self._genome_of_params)
        self._parents: dict[int, list[int]] = {}  # generation → parents, as stored
        self._step_start: dict[tuple, float] = {}

    def _key_of_finished(self, trial: FrozenTrial) -> tuple | None:
        return self._history.add_finished(trial)  # ranked by the next surrogate proposal

    def _genome_of_params(self, params: dict[str, Any]) -> Genome | None:
        decoded = self._space.decode(params)
        if decoded is None:
            return None
        return Genome(*decoded, critical=self._space.critical_of(params))

    def _params_of(self, genome: Genome) -> dict[str, Any]:
        return self._space.encode(
            genome.factors, genome.n_hat, genome.attention_scale, critical=genome.critical
        )
