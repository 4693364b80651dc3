"""Which trial a study exports, by which rule: the retrieval guard's pick, else the re-rank's,
else the best value. Every rule honours the study's direction."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import RopeScaling
from longrope_opt.samplers import CONSTRAINTS_KEY
from longrope_opt.samplers import rank_key
from longrope_opt.space import SearchSpace
from longrope_opt.studies._config import SearchConfig


def space_of_study(study: optuna.Study, trial: Any = None) -> SearchSpace:
    """The `SearchSpace` a study's trials were evaluated in (its params → factors converter).

    From the study's search config when it has one (`run_search`, `longrope-opt search`, any
    release); for a study made by `open_study` without one, from its RoPE spec and target length,
    with n̂ and t as `trial` recorded them.

    Raises:
        InvalidArgumentError: A plain Optuna study (no recorded RoPE spec).
    """
    spec = record.read_spec(study)
    if spec is None:
        raise InvalidArgumentError(
            f"study {study.study_name!r} records no RoPE spec: it was not made by `run_search` "
            "or `open_study`; use `SearchSpace.to_scaling(trial.params)`."
        )
    if record.read_config(study) is not None:
        config = SearchConfig.from_study(study)
        resolved = record.base_from_record(config.base) if isinstance(config.base, dict) else None
        return config.build_space(spec, resolved)
    base = record.read_base(study)
    user = trial.user_attrs if trial is not None else {}
    length = record.target_length(study)
    if length is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no target length.")
    return SearchSpace(
        spec,
        length,
        n_hat=(int(user.get("n_hat", 0)),),
        attention="none",
        attention_value=float(user.get("attention_scale", 1.0)),
        base=None if base is None else base[0],
        base_length=None if base is None else base[1],
    )


def better_first(study: optuna.Study) -> float:
    """1 for a study that minimizes, -1 for one that maximizes: ``sorted(key=sign * value)``
    puts the best first either way."""
    return 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Complete trials with a finite value, best first (ties: the earlier trial). In a study with
    constraints (Optuna's ``constraints`` system attr), feasible trials come first, then
    infeasible ones by total violation, as the sampler ranks its population."""
    sign = better_first(study)
    complete = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and math.isfinite(t.value)
    ]  # fmt: skip
    constrained = any(CONSTRAINTS_KEY in t.system_attrs for t in complete)
    return sorted(complete, key=lambda t: rank_key(t, sign, constrained))


def reranked_order(study: optuna.Study) -> list[FrozenTrial]:
    """The re-ranked trials, best re-ranked value first (empty when not re-ranked)."""
    sign = better_first(study)
    values = {n: v for n, v in record.read_rerank(study).items() if math.isfinite(v)}
    trials = study.get_trials(deepcopy=False)
    return [trials[n] for n in sorted(values, key=lambda n: (sign * values[n], n))]


def reranked_best(study: optuna.Study) -> tuple[RopeScaling, FrozenTrial] | None:
    """The re-ranked winner (best finite re-ranked value), or None if the study was not
    re-ranked."""
    order = reranked_order(study)
    if not order:
        return None
    return space_of_study(study, order[0]).to_scaling(order[0].params), order[0]


def guarded_trial(study: optuna.Study) -> FrozenTrial | None:
    """The retrieval guard's winner (None when no guard decided)."""
    winner = record.read_guard(study).get("winner")
    return None if winner is None else study.get_trials(deepcopy=False)[int(winner)]


def best_seed(study: optuna.Study) -> FrozenTrial:
    """The study's best complete seed trial (user attr ``seed``: PI, NTK, YaRN, YaRN-cd, ...)."""
    return _first_seed(study, ranked_trials(study))


def _first_seed(study: optuna.Study, ranked: list[FrozenTrial]) -> FrozenTrial:
    seeds = [t for t in ranked if t.user_attrs.get("seed")]
    if not seeds:
        raise InvalidArgumentError(
            f"study {study.study_name!r} has no completed seed trial to compare with."
        )
    return seeds[0]


def guard_candidates(study: optuna.Study, top: int) -> tuple[FrozenTrial, list[FrozenTrial]]:
    """The retrieval guard's bar and candidates: the best seed (`best_seed`), and the re-ranked
    trials in re-ranked order, else the `top` best trials."""
    ranked = ranked_trials(study)  # once: the bar and the fallback candidates both read it
    return _first_seed(study, ranked), reranked_order(study) or ranked[:top]


@dataclasses.dataclass(frozen=True)
class Winner:
    """The trial a study exports, and the rule that chose it.

    Attributes:
        scaling: Its `RopeScaling`, exactly as the objective evaluated it (absolute factors).
        trial: The trial.
        rule: ``"guarded"`` (the retrieval guard's pick, `guard_study`), ``"re-ranked"`` (best
            at full fidelity, `rerank_study`) or ``"best"`` (the study's best value).
    """

    scaling: RopeScaling
    trial: FrozenTrial
    rule: str


def study_winner(study: optuna.Study) -> Winner:
    """The trial to export: the guarded winner when the study ran the retrieval guard, else the
    re-ranked winner when it was re-ranked, else the best trial (in the study's direction).

    The study's own `SearchSpace` converts the trial's params (`SearchSpace.to_scaling`): a
    baseline's non-monotone proposal is repaired as it was evaluated, and for a secondary search
    the factors are composed with the base stage, i.e. absolute.

    Raises:
        InvalidArgumentError: The study has no completed trial.
    """
    chosen: tuple[FrozenTrial, str] | None = None
    guarded = guarded_trial(study)
    if guarded is not None:
        chosen = guarded, "guarded"
    elif reranked_order(study):
        chosen = reranked_order(study)[0], "re-ranked"
    else:
        ranked = ranked_trials(study)
        if not ranked:
            raise InvalidArgumentError(f"study {study.study_name!r} has no completed trial yet.")
        chosen = ranked[0], "best"
    trial, rule = chosen
    scaling = space_of_study(study, trial).to_scaling(trial.params)
    return Winner(dataclasses.replace(scaling, method="searched"), trial, rule)


def best_scaling(study: optuna.Study) -> tuple[RopeScaling, FrozenTrial]:
    """`study_winner`'s scaling and trial: the guarded winner, else the re-ranked one, else the
    best trial."""
    winner = study_winner(study)
    return winner.scaling, winner.trial


def stored_trained_length(study: optuna.Study) -> int | None:
    """The trained length a study's search was told (`SearchConfig.trained_length`), or None
    (the checkpoint's own, or a study made without a config)."""
    if record.read_config(study) is None:
        return None
    return SearchConfig.from_study(study).trained_length
