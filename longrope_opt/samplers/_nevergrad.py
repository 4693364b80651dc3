"""`NevergradSampler`: any nevergrad optimizer driving an Optuna study over the LongRoPE space.

The bridge follows Optuna's CMA-ES bridge: ``ask()`` in `sample_relative`, ``tell()`` in
`after_trial`. Its state is rebuilt from the storage, never kept in a side file: a fresh process
(or another worker) replays every finished trial it has not told yet as a "tell not asked"
(``parametrization.spawn_child``). Trials it did not ask for — the enqueued PI/NTK/YaRN seeds,
other workers' trials — are told the same way, so every baseline starts from the same seeds.

Honest tells: a complete trial tells its value; a pruned trial tells its last reported running
value (what was measured before it stopped); a failed trial is not told (there is no value).
The monotone constraint is not this sampler's business: like every baseline, its raw proposal is
stored as the trial's parameters and the objective evaluates the repaired vector
(`SearchSpace.repair`), so all samplers are compared under one documented policy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial
from optuna.trial import TrialState

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.samplers._base import SpaceSampler
from longrope_opt.samplers._index import same_study
from longrope_opt.samplers._index import study_key
from longrope_opt.samplers._protocol import EvolutionSpace


if TYPE_CHECKING:
    import nevergrad as ng

_TOLD = (TrialState.COMPLETE, TrialState.PRUNED)


def _import_nevergrad() -> Any:
    try:
        # the optional extra `nevergrad`
        import nevergrad
    except ImportError as exc:
        raise ImportError(
            "NevergradSampler needs nevergrad: pip install 'longrope-opt[nevergrad]'."
        ) from exc
    return nevergrad


class NevergradSampler(SpaceSampler):
    """A nevergrad optimizer as an Optuna sampler over an `EvolutionSpace`.

    Args:
        space: The LongRoPE search space (the objective's).
        optimizer: A registry name (``"NGOpt"``, ``"CMA"``, ``"TwoPointsDE"``, ``"PSO"``,
            ``"OnePlusOne"``, ...) or a nevergrad optimizer class / ``ConfiguredOptimizer``.
        budget: Evaluations the optimizer plans for (some optimizers adapt to it).
        num_workers: Parallel evaluations the optimizer should expect.
        seed: Seeds the parametrization's random state.
    """

    def __init__(
        self,
        *,
        space: EvolutionSpace,
        optimizer: str | Any = "NGOpt",
        budget: int | None = None,
        num_workers: int = 1,
        seed: int | None = None,
    ) -> None:
        ng_ = _import_nevergrad()
        if isinstance(optimizer, str):
            if optimizer not in ng_.optimizers.registry:
                close = sorted(
                    n for n in ng_.optimizers.registry if n.lower() == optimizer.lower()
                )
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise InvalidArgumentError(
                    f"`optimizer` must be a nevergrad registry name such as 'NGOpt', 'CMA', "
                    f"'TwoPointsDE', 'PSO', 'OnePlusOne', got {optimizer!r}{hint}."
                )
            optimizer = ng_.optimizers.registry[optimizer]
        if budget is not None and budget < 1:
            raise InvalidArgumentError(
                f"`budget` must be None or an integer >= 1, got {budget!r}."
            )
        if num_workers < 1:
            raise InvalidArgumentError(
                f"`num_workers` must be an integer >= 1, got {num_workers!r}."
            )
        super().__init__(space=space, seed=seed)
        self._factory = optimizer
        self._budget = budget
        self._num_workers = num_workers
        self._seed = seed
        self._opt: ng.optimization.Optimizer | None = None
        self._asked: dict[int, Any] = {}
        self._told: set[int] = set()
        self._study: tuple[Any, int] | None = None  # (storage, study id) the optimizer serves

    # ----- nevergrad side ---------------------------------------------------------------------

    def _parametrization(self) -> Any:
        ng_ = _import_nevergrad()
        s = self._space
        parts: dict[str, Any] = {
            "lam": ng_.p.Array(shape=(len(s.param_names),), lower=s.low, upper=s.high)
        }
        bounds = s.critical_bounds
        if bounds is not None:  # the critical shape: c is an integer parameter too
            parts["c"] = ng_.p.Scalar(lower=bounds[0], upper=bounds[1]).set_integer_casting()
        if s.n_hat_choices is not None and len(s.n_hat_choices) > 1:
            parts["n_hat"] = ng_.p.Choice(list(s.n_hat_choices))
        if s.attention_range is not None:
            parts["t"] = ng_.p.Scalar(lower=s.attention_range[0], upper=s.attention_range[1])
        param = ng_.p.Dict(**parts)
        param.random_state = np.random.RandomState(self._seed)
        return param

    @property
    def optimizer(self) -> Any:
        """The live nevergrad optimizer (None before the first trial)."""
        return self._opt

    def _value_of(self, params: dict[str, Any]) -> dict[str, Any] | None:
        s = self._space
        decoded = s.decode(params)
        if decoded is None:
            return None
        factors, n_hat, t = decoded
        first = len(s.names) - len(s.param_names)
        value: dict[str, Any] = {"lam": np.clip(factors[first:], s.low, s.high)}
        critical = s.critical_of(params)
        if critical is not None:
            value["c"] = critical
        if s.n_hat_choices is not None and len(s.n_hat_choices) > 1:
            value["n_hat"] = n_hat
        if s.attention_range is not None:
            lo, hi = s.attention_range
            value["t"] = float(min(max(lo if t is None else t, lo), hi))
        return value

    @staticmethod
    def _loss(trial: FrozenTrial, state: TrialState, values: Any) -> float | None:
        # A pruned trial is told the estimate it reached: its `partial_ppl` user attr when the
        # objective records one (PerplexityObjective does; its reports may be per-sample NLLs),
        # else its last reported value.
        intermediate = trial.intermediate_values
        if state == TrialState.COMPLETE and values:
            loss = float(values[0])
        elif state == TrialState.PRUNED and "partial_ppl" in trial.user_attrs:
            loss = float(trial.user_attrs["partial_ppl"])
        elif state == TrialState.PRUNED and intermediate:
            loss = float(intermediate[max(intermediate)])
        else:
            return None
        return loss if math.isfinite(loss) else None

    def _sync(self, study: Study) -> None:
        # Build the optimizer on first use, then tell every finished trial not yet told. A
        # sampler handed to another study (Optuna allows it) starts a new optimizer: its trial
        # numbers would otherwise read as the last study's.
        if not same_study(self._study, study):
            self._opt, self._asked, self._told = None, {}, set()
            self._study = study_key(study)
        if self._opt is None:
            self._opt = self._factory(
                parametrization=self._parametrization(),
                budget=self._budget,
                num_workers=self._num_workers,
            )
        for t in study.get_trials(deepcopy=False, states=_TOLD):
            if t.number not in self._told and t.number not in self._asked:
                self._tell(t.number, t.params, self._loss(t, t.state, t.values), None)

    def _tell(
        self, number: int, params: dict[str, Any], loss: float | None, candidate: Any
    ) -> None:
        self._told.add(number)
        if loss is None:
            return
        if candidate is None:  # a trial this process did not ask: tell it as "not asked"
            value = self._value_of(params)
            if value is None:
                return
            candidate = self._live().parametrization.spawn_child(new_value=value)
        self._live().tell(candidate, loss)

    def _live(self) -> Any:
        assert self._opt is not None, "_sync builds the optimizer before any tell or ask"
        return self._opt

    # ----- optuna.samplers.BaseSampler --------------------------------------------------------

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._single_objective_only(study)
        if not search_space:
            return {}
        self._sync(study)
        candidate = self._live().ask()
        self._asked[trial.number] = candidate
        value = candidate.value
        s = self._space
        factors = np.ones(len(s.names))
        factors[len(s.names) - len(s.param_names) :] = value["lam"]
        critical = int(value["c"]) if "c" in value else None
        params = s.encode(factors, value.get("n_hat", 0), value.get("t"), critical=critical)
        return {k: v for k, v in params.items() if k in search_space}

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Any
    ) -> None:
        if self._opt is None or trial.number in self._told:
            return
        loss = self._loss(trial, state, values)
        self._tell(trial.number, trial.params, loss, self._asked.pop(trial.number, None))
