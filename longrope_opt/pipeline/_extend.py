"""`extend`: from a model to a model you can ship, in one study.

search → re-rank → retrieval guard → validate on held-out text → export, each a stage of
`longrope_opt.studies.run_stages` over one study (the same function `run_search` runs), with
the settings the guide recommends: a fitness on several documents of every kind of the corpus,
the population pruner, the retrieval constraint, LongRoPE2's critical-dimension seeds, n̂ = 0 (so
vanilla transformers loads the exported model exactly). Before anything runs, one timed
forward sizes the plan to the budget (`make_plan`); the plan is stored in the study, and every
stage keeps its output in the study's storage, so rerunning the same call after an interruption
continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longrope_opt import record
from longrope_opt.data import PERL_DOC
from longrope_opt.data import check_source
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.evaluation import check_margin
from longrope_opt.models import DEFAULT_MODEL
from longrope_opt.models import check_gguf_arch
from longrope_opt.models import device_name
from longrope_opt.models import gguf_source
from longrope_opt.models import read_gguf_arch
from longrope_opt.models import resolve_device
from longrope_opt.objectives import check_passkey_form
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.pipeline._extend_checks import already_shipped
from longrope_opt.pipeline._extend_checks import check_past_window
from longrope_opt.pipeline._extend_checks import forget
from longrope_opt.pipeline._extend_checks import new_file as new_storage_file
from longrope_opt.pipeline._extend_checks import stored_passkey_form
from longrope_opt.pipeline._extend_stages import extend_stages
from longrope_opt.pipeline._extend_stages import finetune_plan
from longrope_opt.pipeline._extend_stages import run_counted
from longrope_opt.pipeline._finetune_stage import Finetune
from longrope_opt.pipeline._finetune_stage import FinetuneOutcome
from longrope_opt.pipeline._plan import Plan
from longrope_opt.pipeline._plan import make_plan
from longrope_opt.pipeline._plan import parse_budget
from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import finished_count
from longrope_opt.pipeline._stages import headline
from longrope_opt.pipeline._stages import held_out_documents
from longrope_opt.samplers import next_queued_params
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import prepare


logger = logging.getLogger(__name__)

#: The evolution `extend` runs: the LongRoPE sampler's default operators (children screened by
#: a model of the trials, trust-region model steps: `bench/results/landscapes.txt`), a small
#: generation 0 (P = 6) so the model takes over after the seeds, 3 parents (the population
#: pruner's bar). Its steps follow the budget by themselves: the model's prior weakens as trials
#: accumulate (chosen by leave-one-out error), and its trust region grows on success.
EVOLUTION = {"population_size": 6, "num_mutations": 3, "num_crossovers": 3, "num_parents": 3,
             "mutation_prob": 0.3, "operators": "surrogate"}  # fmt: skip
#: The seeds that can be best past the trained length (PI and plain NTK never are here).
SEEDS = ("yarn", "yarn-cd", "ntk-cd")


def extend_config(
    model: str, target_length: int, *, corpus: str = "builtin", seed: int = 0,
    trained_length: int | None = None, passkey_form: str = "single",
    warm_start: str | None = None,
) -> SearchConfig:  # fmt: skip
    """The search `extend` runs: 3 documents taking turns over the corpus's kinds, the
    population pruner, a 4-passkey retrieval constraint, the YaRN/YaRN-cd/NTK-cd seeds (and a
    shorter extension's factors carried, `warm_start`), n̂ = 0, the LongRoPE attention rule,
    the LongRoPE sampler's default (surrogate) operators."""
    return SearchConfig(
        model=model, corpus=corpus, samples=3, seed=seed, target_length=target_length, n_hat=0,
        sampler="longrope", sampler_options=dict(EVOLUTION), seed_methods=SEEDS,
        pruner="population", draw="kinds", retrieval_keys=4, trained_length=trained_length,
        passkey_form=passkey_form, warm_start=warm_start,
    )  # fmt: skip


def resolve_passkey_form(form: str, device: str) -> str:
    """``"auto"``: the branched form where it runs (the CPU), else the single one."""
    if form != "auto":
        return check_passkey_form(form)
    return "branched" if resolve_device(device) == "cpu" else "single"


@dataclass
class ExtendResult:
    """What `extend` did and wrote.

    Attributes:
        study: The study (every stage's output is in its storage).
        plan: The plan it ran.
        verdict: The shipped winner's verdict against the reference row (``"dominates"``, ...).
        reference: The reference row (the best classic row measured).
        headline: The verdict line (what the CLI prints first).
        files: ``(what, path)`` of everything written, the one to use first.
        load: The one line that loads the model to use.
        summary: The validation's `longrope_opt.evaluation.Summary` (None for a rerun that had
            nothing left to do: `validation.json` in `out` holds it).
        seconds: Seconds each stage took in this call.
        nothing_left: True when every stage was already in the study and the store and `out`
            still held what was written: nothing was measured or written again.
        finetuned: With `finetune`: the fine-tuning stage's `FinetuneOutcome` (its verdict
            after fine-tuning, what to ship now, `load` names it).
    """

    study: Any
    plan: Plan
    verdict: str
    reference: str
    headline: str
    files: list[tuple[str, str]]
    load: str
    summary: Any
    seconds: dict[str, float]
    nothing_left: bool = False
    finetuned: FinetuneOutcome | None = None


def extend(
    model: str = "smollm2-135m",
    target_length: int = 16384,
    *,
    corpus: str = "builtin",
    held_out: str | None = None,
    budget: str | float | None = None,
    trials: int | None = None,
    out: str | Path = "extended",
    storage: Any = None,
    study_name: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    attn: str | None = None,
    fuse: bool = True,
    heartbeat_interval: int | None = 60,
    seed: int = 0,
    margin: float = DEFAULT_MARGIN,
    trained_length: int | None = None,
    progress: bool = True,
    graceful_interrupt: bool = False,
    on_plan: Callable[[Plan, bool], None] | None = None,
    passkey_form: str = "single",
    gguf: bool | None = None,
    warm_start: str | None = None,
    finetune: int | None = None,
    finetune_corpus: str = PERL_DOC,
    finetune_settings: dict[str, Any] | None = None,
) -> ExtendResult:
    """Extend `model` to `target_length` tokens and write a model you can ship to `out`.

    Args:
        model: ``"smollm2-135m"``, a model directory, a ``.gguf`` file or a hub id.
        target_length: The context length to reach (above the model's trained length).
        corpus: The search's text: ``"builtin"``, files, a `datasets` name, or several,
            comma-separated (`longrope_opt.data.load_samples`).
        held_out: The validation's text (default `corpus`); only documents no stage read are
            used, and too few is an error before any trial runs.
        budget: Wall time for everything (``"2h"``, ``"20m"``, seconds); the plan fits it.
        trials: Instead of `budget`: this many search trials and the default stage settings.
            Neither: a budget of 1 h.
        out: The folder that receives the model directory, factors, tables and report.
        storage: The study's storage (default ``$LONGROPE_OPT_STORAGE`` or
            ``sqlite:///longrope.db``).
        study_name: Default ``extend-<model>-<target length>``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: The compute path (``auto``: the fastest here).
        attn: The attention kernel (None: the best available).
        fuse: Compile the element-wise work (faster long forwards; a one-off compile).
        heartbeat_interval: Seconds between a running trial's heartbeats (None or 0: off): a
            trial whose process was killed is retried after two silent intervals.
        seed: Chooses the documents.
        margin: The practical margin on the perplexity ratio: the searched winner ships only
            when it beats the best classic row by more (`longrope_opt.evaluation.summarize`);
            otherwise the formula is what the summary's load line points at.
        trained_length: The length the checkpoint was trained or fine-tuned to, when its config
            says otherwise (default: the config's: `max_position_embeddings`, or the reach of
            its `yarn`/`linear` scaling).
        progress: Progress bars: one per stage and one overall, with an ETA.
        graceful_interrupt: The first Ctrl-C finishes the running trial, then stops.
        on_plan: Called with the plan (and whether it was read from the study) before any
            stage runs (the CLI prints it).
        passkey_form: How the retrieval constraint, the guard and the validation measure
            passkeys (`longrope_opt.objectives.passkey_results`): ``"single"`` (the paper's
            prompt), ``"branched"`` (one forward a row for all its keys; CPU only) or
            ``"auto"`` (branched on a CPU, single elsewhere). A study keeps the form it was
            made with: on a resume, ``"auto"`` takes the stored one.
        gguf: Also write ``model.gguf``, the model's GGUF with the winner's factors, for
            llama.cpp (`longrope_opt.models.export_gguf`). None: when the model came as a GGUF
            (a ``.gguf`` file, or the ``smollm2-135m`` alias).
        warm_start: A shorter extension's factors to try first (progressive extension, as
            LongRoPE extends 256k → 2048k): its ``factors.json`` or ``"study:NAME"``, carried to
            `target_length` (`longrope_opt.studies.enqueue_warm_start`). None: none, or what
            the resumed study has.
        finetune: Then fine-tune the winner and the best formula alike for this many steps,
            validate both and ship the better (`longrope_opt.pipeline.Finetune`): PoSE to
            `target_length` from samples of the trained length, mixed windows. Not in the
            budget's plan: its steps come on top. None: no fine-tuning.
        finetune_corpus: The fine-tuning's text (default: Perl's manual, neither the search's
            built-in corpus nor held-out books).
        finetune_settings: More `finetune_and_export` settings (``learning_rate``,
            ``warmup_steps``, ``grad_accum``, ``pose_tokens``, ``short_share``, ``save_steps``,
            ``lora``).

    Returns:
        An `ExtendResult`.

    Raises:
        InvalidArgumentError: Bad arguments, a budget shorter than one forward, or too few
            held-out documents; all before any trial runs.
    """
    check_margin(margin)
    seconds_budget = None if budget is None else parse_budget(budget)
    if seconds_budget is None and trials is None:
        seconds_budget = 3600.0
    if seconds_budget is not None and trials is not None:
        raise InvalidArgumentError("give one of `budget` and `trials`, not both.")
    held_out = held_out or corpus
    check_source(held_out, param="held_out" if held_out != corpus else "corpus")
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"`out` {str(out)!r} is an existing file, not a folder.")
    check_past_window(model, target_length, trained_length)
    tuning = finetune_plan(finetune, finetune_corpus, finetune_settings)
    config = extend_config(model, target_length, corpus=corpus, seed=seed,
                           trained_length=trained_length, warm_start=warm_start)  # fmt: skip
    name = study_name or f"extend-{config.default_study_name()}"
    if passkey_form == "auto":  # a study keeps its form: resumed on another device too
        passkey_form = stored_passkey_form(storage, name) or passkey_form
    config = dataclasses.replace(config, passkey_form=resolve_passkey_form(passkey_form, device))
    context = {"held_out": held_out, "seed": seed, "margin": margin}
    if config.passkey_form != "single":  # (a study shipped before the forms: single)
        context["passkey_form"] = config.passkey_form
    if gguf is None:
        gguf = model == DEFAULT_MODEL or str(model).endswith(".gguf")
    if gguf:  # (a study shipped before GGUF exports: none written)
        # a model with no GGUF, or one llama.cpp cannot rescale, is one line before anything runs
        check_gguf_arch(read_gguf_arch(gguf_source(model)))
        context["gguf"] = True
    if tuning:  # (a study shipped before fine-tuning: none)
        context["finetune"] = {"corpus": finetune_corpus, **tuning}
    done = already_shipped(storage, name, out, context)
    if done is not None:
        study, shipped, stored_plan = done
        files = [(what, where) for what, where, _ in shipped["files"]]
        after = shipped.get("finetuned")
        finetuned = FinetuneOutcome.from_dict(after) if after else None
        logger.debug("nothing left to measure: %s", shipped["headline"])
        return ExtendResult(
            study=study, plan=stored_plan, verdict=shipped["verdict"],
            reference=shipped["reference"], headline=shipped["headline"], files=files,
            load=finetuned.load if finetuned else _load_line(files[0][1]), summary=None,
            seconds={}, nothing_left=True, finetuned=finetuned,
        )  # fmt: skip
    new_file = new_storage_file(storage)
    existed = stored_passkey_form(storage, name, exists=True) is not None
    search = prepare(config, storage=storage, study_name=name, dtype=dtype, device=device,
                     attn=attn, fuse=fuse, heartbeat_interval=heartbeat_interval, progress=progress)  # fmt: skip
    plan, resumed = _sized_plan(search, seconds_budget, trials, held_out, seed, existed, new_file)
    if on_plan is not None:  # the caller shows the plan (the CLI prints it)
        on_plan(plan, resumed)
    else:
        logger.info("extend %s: %s", name, plan.describe(target_length))
    outcome = Outcome()
    stages = extend_stages(plan, out, outcome, held_out=held_out, seed=seed, margin=margin,
                           context=context, gguf=gguf, graceful_interrupt=graceful_interrupt,
                           finetune=tuning, finetune_corpus=finetune_corpus, device=device,
                           attn=attn)  # fmt: skip
    seconds = run_counted(search, stages, plan, progress)
    tuned = next((s.result for s in stages if isinstance(s, Finetune)), None)
    return ExtendResult(
        study=search.study, plan=plan, verdict=outcome.verdict, reference=outcome.reference,
        headline=headline(outcome), files=outcome.files,
        load=tuned.load if tuned else _load_line(outcome.files[0][1]), summary=outcome.summary,
        seconds=seconds, finetuned=tuned,
    )  # fmt: skip


def _sized_plan(
    search: Any, budget: float | None, trials: int | None, held_out: str, seed: int,
    existed: bool, new_file: Path | None,
) -> tuple[Plan, bool]:  # fmt: skip
    """The study's stored plan (and whether it was), else a new one sized by one timed forward
    and stored; enough held-out documents checked before any trial. A refusal forgets a study
    this call made, never another."""
    config = search.config
    stored = record.read_plan(search.study)
    try:
        plan = Plan.from_dict(stored) if stored else make_plan(
            time_forward(search), budget=budget, trials=trials, seeds=len(SEEDS),
            samples=config.samples, retrieval_keys=config.retrieval_keys,
            passkey_form=config.passkey_form or "single", length=config.target_length,
        )  # fmt: skip
        held_out_documents(search, held_out, plan.held_out_docs, seed)  # enough left, before a trial
    except InvalidArgumentError:
        if not existed:  # refused before its first trial (a budget under one forward)
            forget(search.study, new_file)
        raise
    here = device_name(next(search.model.parameters()).device)  # what the plan is timed on
    if not stored:
        plan = dataclasses.replace(plan, machine=here)
        record.write_plan(search.study, plan.to_dict())
        return plan, False
    # the time left and the progress bar start where the study is
    guarded = record.read_guard(search.study).get("winner") is not None
    # a plan stored before plans named their machine: the CPU the study's provenance names
    compute = record.read_provenance(search.study).get("compute", {})
    began = plan.machine or (compute.get("cpu") if compute.get("device") == "cpu" else None)
    plan = dataclasses.replace(plan, finished=finished_count(search.study), here=here,
                               machine=began, guard_done=guarded and plan.guard_keys > 0)  # fmt: skip
    return plan, True


def _load_line(model_dir: str) -> str:
    return f"AutoModelForCausalLM.from_pretrained({model_dir!r})"


def time_forward(search: Any) -> float:
    """Seconds of one forward at the target length on this machine: what the plan is sized by.

    The forward timed is the first queued trial's first document (the first seed's), handed to
    that trial (`PerplexityObjective.measure_first_ahead`), so sizing the plan costs no forward;
    an objective without that method is timed on an unscaled forward of the first document."""
    first = next_queued_params(search.study)
    ahead = getattr(search.measure, "measure_first_ahead", None)
    start = time.perf_counter()
    if first and ahead is not None:
        ahead(first)
    else:
        evaluate_perplexity(search.model, [search.measure.samples[0]], None)
    return time.perf_counter() - start
