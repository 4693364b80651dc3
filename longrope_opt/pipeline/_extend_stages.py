"""`extend`'s stages as a list, its fine-tuning settings checked, and the loop that runs them
under one progress bar counted in forwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from longrope_opt.data import PERL_DOC
from longrope_opt.data import check_source
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.pipeline._finetune_stage import Finetune
from longrope_opt.pipeline._plan import Plan
from longrope_opt.pipeline._stages import Export
from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import Validate
from longrope_opt.studies import Guard
from longrope_opt.studies import Rerank
from longrope_opt.studies import Stage
from longrope_opt.studies import Trials
from longrope_opt.studies import run_stages


def extend_stages(
    plan: Plan, out: Path, outcome: Outcome, *, held_out: str, seed: int = 0,
    margin: float = DEFAULT_MARGIN, context: dict[str, Any] | None = None, gguf: bool = False,
    graceful_interrupt: bool = False, finetune: dict[str, Any] | None = None,
    finetune_corpus: str = PERL_DOC, device: str = "auto", attn: str | None = None,
) -> list[Stage]:  # fmt: skip
    """`extend`'s stages for `plan`, in order: search, re-rank, guard, validate, export, and
    with `finetune` (`finetune_plan`'s settings) the fine-tuning. Each reads and writes the
    study's record only, so `run_stages(search, stages)` resumes, and a user can run any of
    them alone over a prepared study (e.g. ``[Validate(...)]`` on another held-out text).

    Args:
        plan: The plan (`make_plan`, or the one the study stores).
        out: The folder that receives what the export and fine-tuning write.
        outcome: Filled by validate, read by export and fine-tuning.
        held_out: The validation's text.
        seed: Chooses the documents.
        margin: The verdict's practical margin.
        context: Recorded with what was shipped (what a rerun compares).
        gguf: Write the GGUF of what the verdict ships.
        graceful_interrupt: The first Ctrl-C finishes the running trial, then stops.
        finetune: The fine-tuning's settings (empty or None: no fine-tuning stage).
        finetune_corpus: The fine-tuning's text.
        device: Where fine-tuning trains.
        attn: Attention kernel of the fine-tuning.
    """
    stages: list[Stage] = [
        Trials(plan.trials, graceful_interrupt=graceful_interrupt),
        Rerank(0),
        Guard(plan.guard_keys),
        Validate(held_out, plan.held_out_docs, plan.validation_keys, plan.classic, out, outcome,
                 seed=seed, margin=margin),  # fmt: skip
        Export(out, outcome, dict(context or {}), gguf=gguf),
    ]
    if finetune:
        stages.append(Finetune(out, outcome, finetune, held_out, plan.held_out_docs,
                               plan.validation_keys, plan.classic, corpus=finetune_corpus,
                               seed=seed, margin=margin, device=device, attn=attn, gguf=gguf))  # fmt: skip
    return stages


def finetune_plan(
    steps: int | None, corpus: str, settings: dict[str, Any] | None
) -> dict[str, Any]:
    """`extend`'s fine-tuning settings (empty: none), checked before anything loads: `steps`,
    10 warm-up steps (a tenth of a shorter run), a checkpoint every 25 steps, `settings` on
    top."""
    if steps is None:
        if settings:
            raise InvalidArgumentError("`finetune_settings` needs `finetune` (its steps).")
        return {}
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidArgumentError(f"`finetune` must be an integer >= 1 (steps), got {steps!r}.")
    check_source(corpus, param="finetune_corpus")
    allowed = {"learning_rate", "warmup_steps", "grad_accum", "pose_tokens", "short_share",
               "save_steps", "lora", "autocast_dtype", "gradient_checkpointing"}  # fmt: skip
    unknown = sorted(set(settings or {}) - allowed)
    if unknown:
        raise InvalidArgumentError(
            f"`finetune_settings` takes {', '.join(sorted(allowed))}; got {unknown[0]!r}."
        )
    return {"steps": steps, "warmup_steps": min(10, steps // 10), "save_steps": min(25, steps),
            **(settings or {})}  # fmt: skip


def run_counted(search: Any, stages: list[Stage], plan: Plan, progress: bool) -> dict[str, float]:
    """`run_stages` under one overall progress bar counted in forwards, from where the study is."""
    forwards = plan.forwards()
    # Forwards are fractional: one decimal, or the sum of the stages shows as 50.699999999999996.
    overall = tqdm(total=round(sum(forwards.values()), 1), initial=round(plan.done_forwards(), 1),
                   desc="extend", unit="fwd", disable=not progress, position=0,
                   bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} fwd [{elapsed}<{remaining}]")  # fmt: skip
    reached = [plan.done_forwards()]  # counted at the start

    def advance(stage: Any) -> None:
        # to the stage's end, counted whole (rounded once: the parts' roundings would add up)
        reached[0] += forwards.get(stage.name, 0.0) - plan.done_by_stage().get(stage.name, 0.0)
        overall.update(round(round(reached[0], 1) - overall.n, 1))

    try:
        return run_stages(search, stages, on_stage=advance)
    finally:
        overall.close()
