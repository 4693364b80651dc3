"""`PerplexityObjective`: an Optuna objective over a patched model (lower is better)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives._base import Objective
from longrope_opt.objectives._perplexity import MODES
from longrope_opt.objectives._perplexity import PerplexityResult
from longrope_opt.objectives._perplexity import evaluate_perplexity
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


logger = logging.getLogger(__name__)

REPORTS = ("running", "sample")


class PerplexityObjective(Objective):
    """Perplexity of the model rescaled by the trial's parameters, on long samples.

    Per trial (see `Objective` for the plumbing): the parameters become a `RopeScaling` (through `SearchSpace`, the same helper the
    sampler uses), the model is patched in place (no reload), and the samples are evaluated. After
    each sample the running perplexity is reported (``trial.report``, step = sample index), so a
    pruner such as ``optuna.pruners.WilcoxonPruner`` can stop a losing candidate early. Per-sample
    NLL and token counts go to trial user attrs; a NaN/inf perplexity fails the trial (Optuna marks
    a NaN return as FAIL), never the study.

    Args:
        model: A loaded RoPE causal LM (`longrope_opt.models.load_model`).
        samples: 1-D token tensors (`longrope_opt.data.load_samples`), each ≥ the target length.
        space: The search space (model spec, target length, parameter names).
        mode: ``"truncate"`` (search), ``"sliding"`` or ``"skip"`` (cheap comparison proxy, see
            `evaluate_perplexity`).
        stride: Sliding stride (``"sliding"`` only).
        skip_tokens: Real tokens per sample (``"skip"`` only).
        skip_chunks: Pieces per sample (``"skip"`` only).
        report: ``"running"`` or ``"sample"`` (see above).
        progress: Show a progress bar over samples inside each trial.

    Example:
        >>> objective = PerplexityObjective(model, samples, space=SearchSpace(spec, 16384))
        >>> study.optimize(objective, n_trials=10)
    """

    value_name = "perplexity"

    def __init__(
        self,
        model: Any,
        samples: Sequence[torch.Tensor],
        *,
        space: SearchSpace,
        mode: str = "truncate",
        stride: int | None = None,
        skip_tokens: int = 1024,
        skip_chunks: int = 2,
        report: str = "running",
        progress: bool = False,
    ) -> None:
        self.validate(
            space.target_length,
            mode=mode,
            stride=stride,
            skip_tokens=skip_tokens,
            skip_chunks=skip_chunks,
            report=report,
        )
        super().__init__(
            model, samples if isinstance(samples, list) else list(samples), space=space,
            progress=progress,
        )  # fmt: skip
        self.mode = mode
        self.stride = stride
        self.skip_tokens = skip_tokens
        self.skip_chunks = skip_chunks
        self.report_as = report
        # First documents measured ahead of their trial (`measure_first_ahead`), by trial params.
        self._ahead: dict[tuple[str, int], tuple[float, int]] = {}

    @staticmethod
    def validate(
        target_length: int,
        *,
        mode: str = "truncate",
        stride: int | None = None,
        skip_tokens: int = 1024,
        skip_chunks: int = 2,
        report: str = "running",
        **unknown: Any,
    ) -> None:
        """Check the options before any model loads.

        Raises:
            InvalidArgumentError: An unknown option, or a value outside its range.
        """
        if unknown:
            raise InvalidArgumentError(
                f"unknown perplexity objective option(s) {sorted(unknown)}; known: mode, stride, "
                "skip_tokens, skip_chunks, report."
            )
        if report not in REPORTS:
            raise InvalidArgumentError(f"`report` must be one of {list(REPORTS)}, got {report!r}.")
        if mode not in MODES:
            raise InvalidArgumentError(f"`mode` must be one of {list(MODES)}, got {mode!r}.")
        if mode == "sliding" and (not isinstance(stride, int) or stride < 1):
            raise InvalidArgumentError(
                f"`stride` must be an integer >= 1 with `mode` 'sliding' (e.g. 256), got {stride!r}."
            )
        if mode == "skip":
            if not isinstance(skip_chunks, int) or skip_chunks < 2:
                raise InvalidArgumentError(
                    f"`skip_chunks` must be an integer >= 2, got {skip_chunks!r}."
                )
            if not isinstance(skip_tokens, int) or not (
                2 * skip_chunks <= skip_tokens <= target_length
            ):
                raise InvalidArgumentError(
                    f"`skip_tokens` must be in [2 x `skip_chunks` = {2 * skip_chunks}, "
                    f"`target_length` = {target_length}], got {skip_tokens!r}."
                )

    @staticmethod
    def sample_length(target_length: int, *, mode: str = "truncate", **options: Any) -> int:
        """Tokens each sample needs: the target length, or `skip_tokens` in ``"skip"`` mode."""
        return int(options.get("skip_tokens", 1024)) if mode == "skip" else int(target_length)

    def full_fidelity(self, samples: Any) -> Callable[[RopeScaling], float]:
        """Full-length perplexity of `samples` (what a ``skip``-mode search approximates)."""
        return lambda scaling: evaluate_perplexity(self.model, samples, scaling).ppl

    def measure_first_ahead(self, params: dict[str, Any]) -> None:
        """Measure the first sample for the trial that will have `params`, ahead of that trial.

        `extend` sizes its plan by the time of one forward at the target length: taken as the
        first queued seed's first document, which its trial then reads instead of measuring it
        again, the timing costs nothing (a forward at 64k is 4-19 minutes on a CPU). The result
        stays in this object: a process that stops before that trial runs loses only the saving.
        """
        scaling = self.space.suggest(optuna.trial.FixedTrial(params))  # as the trial will
        with torch.inference_mode(), apply_rope_scaling(self.model, scaling):
            # the bar as a trial's: at 128k on a CPU this one forward is a quarter of an hour
            result = self._evaluate(self.samples[:1], progress=self.progress)
        self._ahead[self._ahead_key(params)] = (result.sample_nll[0], result.sample_tokens[0])

    def _ahead_key(self, params: dict[str, Any]) -> tuple[str, int]:
        # the same numbers on the same first document (a re-ranking copy reads other samples)
        return json.dumps(params, sort_keys=True), id(self.samples[0])

    def _evaluate(self, samples: Any, **kwargs: Any) -> PerplexityResult:
        return evaluate_perplexity(
            self.model,
            samples,
            None,  # the caller patched the model with the scaling
            mode=self.mode,
            stride=self.stride,
            window=self.space.target_length,
            skip_tokens=self.skip_tokens,
            skip_chunks=self.skip_chunks,
            **kwargs,
        )

    def measure(self, trial: optuna.Trial, scaling: RopeScaling) -> float:
        """Perplexity of the samples; the running value reported after each sample."""

        def on_sample(i: int, running: PerplexityResult) -> None:
            _record(trial, running)  # after every sample: a pruned trial still says its cost
            value = running.ppl
            if self.report_as == "sample":
                value = running.sample_nll[-1] / max(running.sample_tokens[-1], 1)
            self.report(trial, value, i)

        known = _measured_before(trial, len(self.samples))
        if known:
            logger.info(
                "trial %d: %d of %d documents measured by the run it retries, not measured again",
                trial.number, len(known), len(self.samples),
            )  # fmt: skip
        else:
            ahead = self._ahead.pop(self._ahead_key(trial.params), None)
            if ahead is not None:
                known = [ahead]
                logger.info("trial %d: its first document was measured ahead (the plan's timing)",
                            trial.number)  # fmt: skip
        result = self._evaluate(self.samples, on_sample=on_sample, progress=self.progress,
                                known=known)  # fmt: skip
        return result.ppl


def _measured_before(trial: optuna.Trial, n_samples: int) -> list[tuple[float, int]]:
    # A trial starts with per-sample results only when it retries a killed one: Optuna's
    # heartbeat retry copies the failed trial's user attrs (`RetryHeartbeatStaleTrialCallback`),
    # which `_record` wrote after each sample. Same parameters, samples and options (the study's
    # objective record says so), so those documents need no second forward: at 64k a CPU spends
    # 4-19 minutes on each, and a sitting's end would otherwise lose a whole trial.
    nll, tokens = trial.user_attrs.get("sample_nll"), trial.user_attrs.get("sample_tokens")
    if not isinstance(nll, list) or not isinstance(tokens, list) or len(nll) != len(tokens):
        return []
    return [(float(n), int(t)) for n, t in zip(nll, tokens)][:n_samples]


def _record(trial: optuna.Trial, result: PerplexityResult) -> None:
    trial.set_user_attr("sample_nll", [round(x, 6) for x in result.sample_nll])
    trial.set_user_attr("sample_tokens", list(result.sample_tokens))
    trial.set_user_attr("evaluated_tokens", int(result.n_tokens))
    if math.isfinite(result.ppl):
        trial.set_user_attr("partial_ppl", round(result.ppl, 6))
