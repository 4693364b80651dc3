"""`PasskeyObjective`: passkey retrieval (`evaluate_passkey`) as an Optuna objective."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives._base import Objective
from longrope_opt.objectives._passkey import evaluate_passkey
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


class PasskeyObjective(Objective):
    """Passkey retrieval as an Optuna objective (lower is better).

    Args:
        model: A loaded RoPE causal LM.
        samples: Unused text samples; their ``tokenizer`` attribute is used when `tokenizer` is
            not given (so the objective fits the ``factory(model, samples, space=...)`` protocol).
        space: The search space (target length = prompt length unless `lengths` is given).
        tokenizer: The model's tokenizer.
        lengths: Prompt lengths to average over; default ``[space.target_length]``.
        n_trials: Keys per length.
        metric: ``"accuracy"`` — returns the error rate 1 − accuracy; ``"nll"`` — the mean NLL of
            the key tokens (smooth, better for a search).
        seed: Chooses keys and depths (the same for every trial of a study).
        progress: Progress bars.
    """

    def __init__(
        self,
        model: Any,
        samples: Any = None,
        *,
        space: SearchSpace,
        tokenizer: Any = None,
        lengths: list[int] | None = None,
        n_trials: int = 10,
        metric: str = "nll",
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        if metric not in ("accuracy", "nll"):
            raise InvalidArgumentError(
                f"`metric` must be one of ['accuracy', 'nll'], got {metric!r}."
            )
        self.tokenizer = (
            tokenizer if tokenizer is not None else getattr(samples, "tokenizer", None)
        )
        if self.tokenizer is None:
            raise InvalidArgumentError(
                "`tokenizer` is required (or `samples` from `load_samples`, which carry it)."
            )
        super().__init__(model, samples, space=space, progress=progress)
        self.lengths = list(lengths or [space.target_length])
        self.n_trials = n_trials
        self.metric = metric
        self.seed = seed

    def measure(self, trial: optuna.Trial, scaling: RopeScaling) -> float:
        """Mean over lengths of the error rate or the key tokens' NLL; each length reported."""
        values, accuracies = [], []
        for step, length in enumerate(self.lengths):
            result = evaluate_passkey(
                self.model,
                self.tokenizer,
                None,  # the base patched the model with `scaling`
                length,
                n_trials=self.n_trials,
                seed=self.seed,
                progress=self.progress,
            )
            accuracies.append(result.accuracy)
            values.append(1.0 - result.accuracy if self.metric == "accuracy" else result.key_nll)
            self.report(trial, values[-1], step)
        trial.set_user_attr("passkey_accuracy", dict(zip(map(str, self.lengths), accuracies)))
        return float(np.mean(values))
