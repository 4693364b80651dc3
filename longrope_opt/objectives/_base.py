"""`Objective`: the public base of every objective, built-in or installed from an entry point.

A search asks an objective for one number per candidate. Around that number every objective
needs the same plumbing, which lives here once:

* the trial's parameters become a `RopeScaling` through the search space (n̂, t and a repaired
  proposal recorded in the trial's user attrs, which export reads);
* the model is patched with it for the measurement and restored whatever happens (no reload);
* a candidate that does not fit in memory fails its trial — with the allocation it asked for in
  the ``failure`` user attr — and the study and the worker go on;
* a NaN or infinite value fails the trial, never the study;
* the peak GPU memory of the candidate is recorded (``peak_gpu_memory_mb``);
* `report` sends per-sample values to a pruner and stops a losing candidate;
* what the objective says about itself (`study_record`, e.g. the prompts it scores on) is
  recorded in the study on its first trial, and a study recorded otherwise is refused (its
  values would not be comparable).

A subclass implements `measure`, and sets `direction` if larger is better: `run_search`,
the re-rank, `compare`, `export`, `validate` and the dashboard figures follow it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any
from typing import ClassVar

import optuna
import torch

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import peak_memory_mb
from longrope_opt.models import reset_peak_memory
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


#: What a candidate too large for the device raises (CUDA; host memory on CPU).
OUT_OF_MEMORY = (torch.OutOfMemoryError, MemoryError)
DIRECTIONS = ("minimize", "maximize")


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


class Objective:
    """Base of an objective over a model whose RoPE each trial rescales.

    Subclasses implement `measure` and may set `direction`. Construct with
    ``Subclass(model, samples, space=space, **options)``, the call every search makes
    (`longrope_opt.objectives.OBJECTIVES`, entry points included); optional static hooks:
    ``validate(target_length, **options)`` checks options before any model loads, and
    ``sample_length(target_length, **options)`` says how many tokens a sample needs.

    Args:
        model: A loaded RoPE causal LM (`longrope_opt.models.load_model`).
        samples: The documents to measure on (`longrope_opt.data.load_samples`), if any.
        space: The search space (turns a trial into a `RopeScaling`).
        progress: Progress bars inside a trial.

    Example:
        >>> class TailPerplexity(Objective):
        ...     def measure(self, trial, scaling):
        ...         tail = [s[len(s) * 3 // 4 :] for s in self.samples]
        ...         return evaluate_perplexity(self.model, tail, None).ppl  # already patched
    """

    #: ``"minimize"`` or ``"maximize"``: which way is better for this objective's values.
    direction: ClassVar[str] = "minimize"
    #: What the value is, for messages (``"non-finite perplexity (nan)"``).
    value_name: ClassVar[str] = "value"

    def __init__(
        self, model: Any, samples: Any = None, *, space: SearchSpace, progress: bool = False
    ) -> None:
        if self.direction not in DIRECTIONS:
            raise InvalidArgumentError(
                f"`direction` must be one of {list(DIRECTIONS)}, got {self.direction!r}."
            )
        self.model = model
        self.samples = samples
        self.space = space
        self.progress = progress

    def measure(self, trial: optuna.Trial, scaling: RopeScaling) -> float:
        """This candidate's value. The model already runs `scaling` (in inference mode): measure
        it as it is (e.g. ``evaluate_perplexity(self.model, docs, None)``). Report per-sample
        values with `report` so a pruner can stop a losing candidate."""
        raise NotImplementedError

    def study_record(self) -> Any:
        """What this objective wants recorded in its study, once (JSON-ready; None: nothing),
        e.g. the prompts it scores on, so a resumed study is checked against it."""
        return None

    def same_record(self, stored: Any) -> bool:
        """Whether a study that recorded `stored` was scored the way this objective scores."""
        return stored == self.study_record()

    def mismatch(self, stored: Any) -> str:
        """How a study recorded otherwise differs, for the refusal's message."""
        return f"was scored by another {type(self).__name__} setup"

    def _check_study(self, study: optuna.Study) -> None:
        if getattr(self, "_checked", None) == study._study_id:
            return  # once per study and objective: trials then share the verdict
        mine, stored = self.study_record(), record.read_objective_record(study)
        if stored is None and mine is not None:
            record.write_objective_record(study, mine)
        elif stored is not None and not self.same_record(stored):
            raise InvalidArgumentError(
                f"study {study.study_name!r} {self.mismatch(stored)}; use a new `study_name`."
            )
        self._checked = study._study_id

    def full_fidelity(self, samples: Any) -> Callable[[RopeScaling], float]:
        """How a candidate is measured when a search's best are re-ranked on `samples` (more
        documents, full length): by default this objective's own `measure` on them (values in
        its `direction`). Objectives that search on a proxy return their full-length measure."""

        def evaluate(scaling: RopeScaling) -> float:
            again = copy.copy(self)
            again.samples = samples
            trial = optuna.trial.FixedTrial(self.space.to_params(scaling))
            with torch.inference_mode(), apply_rope_scaling(self.model, scaling):
                return float(again.measure(trial, scaling))  # type: ignore[arg-type]

        return evaluate

    def report(self, trial: optuna.Trial, value: float, step: int) -> None:
        """Report a finite per-sample `value` at `step`; stop the trial if the pruner says so.

        The documents measured so far (samples ``0 … step``) go to the trial's ``documents``
        user attr, so a study says what every trial read, pruned ones included."""
        ids = getattr(self.samples, "doc_ids", None)
        if ids:
            trial.set_user_attr("documents", list(ids[: step + 1]))
        if math.isfinite(value):
            trial.report(value, step=step)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after step {step} (value {value:.6g})")

    def __call__(self, trial: optuna.Trial) -> float:
        self._check_study(trial.study)
        scaling = suggest_scaling(trial, self.space)
        device = self.model.get_output_embeddings().weight.device
        reset_peak_memory(device)
        try:
            with torch.inference_mode(), apply_rope_scaling(self.model, scaling):
                value = float(self.measure(trial, scaling))
        except OUT_OF_MEMORY as exc:  # the patch is already undone by its context manager
            return _fail_out_of_memory(trial, exc)
        peak = peak_memory_mb(device)
        if peak is not None:  # what this candidate needed, for sizing the next run
            trial.set_user_attr("peak_gpu_memory_mb", round(peak, 1))
        if not math.isfinite(value):
            trial.set_user_attr("failure", f"non-finite {self.value_name} ({value})")
            return math.nan  # Optuna fails the trial and the study goes on
        return value


def _fail_out_of_memory(trial: optuna.Trial, exc: BaseException) -> float:
    # The trial fails with the reason; the next one starts from freed memory. NaN: Optuna
    # records a failed trial.
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    trial.set_user_attr("failure", f"out of memory: {first[:200]}")
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return math.nan
