"""`PerplexityObjective`: an Optuna objective over a patched model (lower is better)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import peak_memory_mb
from longrope_opt.models import reset_peak_memory
from longrope_opt.objectives._perplexity import MODES
from longrope_opt.objectives._perplexity import PerplexityResult
from longrope_opt.objectives._perplexity import evaluate_perplexity
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


REPORTS = ("running", "sample")


def suggest_scaling(trial: optuna.Trial, space: SearchSpace) -> RopeScaling:
    """The trial's `RopeScaling`, with what was applied recorded in its user attrs.

    n̂ and t go to user attrs even when the space fixes them (export reads them), and a proposal
    the space had to repair (a baseline's non-monotone λ, evaluated sorted) is marked `repaired`.
    """
    scaling = space.suggest(trial)
    trial.set_user_attr("n_hat", scaling.n_hat)
    trial.set_user_attr("attention_scale", scaling.attention_scale)
    if space.is_repaired(trial.params):
        trial.set_user_attr("repaired", space.repair)
    return scaling


class PerplexityObjective:
    """Perplexity of the model rescaled by the trial's parameters, on long samples.

    Per trial: the parameters become a `RopeScaling` (through `SearchSpace`, the same helper the
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

    #: Direction of the returned value.
    direction = "minimize"

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
        self.model = model
        self.samples = list(samples)
        self.space = space
        self.mode = mode
        self.stride = stride
        self.skip_tokens = skip_tokens
        self.skip_chunks = skip_chunks
        self.report = report
        self.progress = progress

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
        """Check the options before any model loads (messages name the CLI flags).

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
            raise InvalidArgumentError(f"`--mode` must be one of {list(MODES)}, got {mode!r}.")
        if mode == "sliding" and (not isinstance(stride, int) or stride < 1):
            raise InvalidArgumentError(
                f"`--stride` must be an integer >= 1 with --mode sliding (e.g. 256), got {stride!r}."
            )
        if mode == "skip":
            if not isinstance(skip_chunks, int) or skip_chunks < 2:
                raise InvalidArgumentError(
                    f"`--skip-chunks` must be an integer >= 2, got {skip_chunks!r}."
                )
            if not isinstance(skip_tokens, int) or not (
                2 * skip_chunks <= skip_tokens <= target_length
            ):
                raise InvalidArgumentError(
                    f"`--skip-tokens` must be in [2 x --skip-chunks = {2 * skip_chunks}, "
                    f"--target-length = {target_length}], got {skip_tokens!r}."
                )

    @staticmethod
    def sample_length(target_length: int, *, mode: str = "truncate", **options: Any) -> int:
        """Tokens each sample needs: the target length, or `skip_tokens` in ``"skip"`` mode."""
        return int(options.get("skip_tokens", 1024)) if mode == "skip" else int(target_length)

    def __call__(self, trial: optuna.Trial) -> float:
        scaling = suggest_scaling(trial, self.space)

        def report(i: int, running: PerplexityResult) -> None:
            _record(trial, running)
            value = running.ppl
            if self.report == "sample":
                value = running.sample_nll[-1] / max(running.sample_tokens[-1], 1)
            if math.isfinite(value):
                trial.report(value, step=i)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned after {i + 1} sample(s), ppl {running.ppl:.4g}")

        device = self.model.get_output_embeddings().weight.device
        reset_peak_memory(device)
        try:
            result = evaluate_perplexity(
                self.model,
                self.samples,
                scaling,
                mode=self.mode,
                stride=self.stride,
                window=self.space.target_length,
                skip_tokens=self.skip_tokens,
                skip_chunks=self.skip_chunks,
                on_sample=report,
                progress=self.progress,
            )
        except OUT_OF_MEMORY as exc:
            return fail_out_of_memory(trial, exc)
        record_peak_memory(trial, device)
        if not math.isfinite(result.ppl):
            trial.set_user_attr("failure", f"non-finite perplexity ({result.ppl})")
            return math.nan  # Optuna fails the trial and the study goes on
        return result.ppl


#: What a candidate too large for the device raises (CUDA; host memory on CPU).
OUT_OF_MEMORY = (torch.OutOfMemoryError, MemoryError)


def fail_out_of_memory(trial: optuna.Trial, exc: BaseException) -> float:
    """This candidate did not fit (the patch is already undone by its context manager): fail
    the trial with the reason stored, keep the study and the worker going; the next trial starts
    from freed memory. Returns NaN, which Optuna records as a failed trial."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    trial.set_user_attr("failure", f"out of memory: {first[:200]}")
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return math.nan


def record_peak_memory(trial: optuna.Trial, device: torch.device) -> None:
    """CUDA: what this candidate needed (user attr), for sizing the next run; CPU: nothing."""
    peak = peak_memory_mb(device)
    if peak is not None:
        trial.set_user_attr("peak_gpu_memory_mb", round(peak, 1))


def _record(trial: optuna.Trial, result: PerplexityResult) -> None:
    # Written after every sample, so a pruned trial still says what it cost.
    trial.set_user_attr("sample_nll", [round(x, 6) for x in result.sample_nll])
    trial.set_user_attr("sample_tokens", list(result.sample_tokens))
    trial.set_user_attr("evaluated_tokens", int(result.n_tokens))
    if math.isfinite(result.ppl):
        trial.set_user_attr("partial_ppl", round(result.ppl, 6))
