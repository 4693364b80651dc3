"""A search as named stages over one study: prepare it, then run its stages in order.

`prepare` turns a `SearchConfig` into a `Search`: the study (created, or checked and resumed)
with its record, the model, the objective, the sampler and its pruner. `run_stages` runs stages
over it in order; each stage keeps its output in the study record as it goes, so rerunning the
same stages continues where an interruption stopped and repeats nothing finished. `run_search`
runs the search's own stages (`Trials`, `Rerank`, `Guard`); `longrope_opt.extend` runs the
same function with validation and export after them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import optuna

from longrope_opt import record
from longrope_opt.data import check_source
from longrope_opt.data import load_samples
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import LongRopeOptError
from longrope_opt.models import choose_attention
from longrope_opt.models import load_model
from longrope_opt.models import read_config
from longrope_opt.models import resolve_device
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.objectives import RetrievalConstraint
from longrope_opt.objectives import check_options
from longrope_opt.objectives import sample_length
from longrope_opt.patching import check_supported
from longrope_opt.rope import TRAINED_LENGTH_ATTR
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import check_sampler_dependencies
from longrope_opt.samplers import make_pruner
from longrope_opt.samplers import make_sampler
from longrope_opt.studies._config import SearchConfig
from longrope_opt.studies._export import resolve_base
from longrope_opt.studies._run import FINISHED
from longrope_opt.studies._run import open_study
from longrope_opt.studies._stages import Search
from longrope_opt.studies._stages import run_stages
from longrope_opt.studies._stages import search_stages
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import open_existing
from longrope_opt.studies._storage import resolve_storage_url
from longrope_opt.studies._warm import enqueue_warm_start


logger = logging.getLogger(__name__)


# ----- preparing a search -----------------------------------------------------------------------


def prepare(
    config: SearchConfig,
    *,
    storage: Any = None,
    study_name: str | None = None,
    budget: int | None = None,
    dtype: str = "auto",
    device: str = "auto",
    attn: str | None = None,
    fuse: bool = True,
    heartbeat_interval: int | None = 60,
    progress: bool = True,
    model: Any = None,
    tokenizer: Any = None,
) -> Search:
    """Create or resume the study of `config`, with everything its stages read.

    A study created with another config is refused (one line naming the first differing
    field). Checks that need no weights (device, corpus, objective options, the space against
    the model's config) run before the model loads.

    Args:
        config: The search.
        storage: An Optuna storage or URL (default ``$LONGROPE_OPT_STORAGE``, else
            ``sqlite:///longrope.db``).
        study_name: Default: `SearchConfig.default_study_name`.
        budget: Trials the sampler is told to expect (nevergrad's optimizers plan for it).
        dtype: Compute path on this machine (see `longrope_opt.models.load_model`).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        attn: Attention kernel (None: the best available).
        fuse: Compile the element-wise work.
        heartbeat_interval: Trial heartbeat in seconds (None or 0: off).
        progress: Progress bars.
        model: A loaded model for `config.model` (comparisons reuse one).
        tokenizer: Its tokenizer (with `model`).
    """
    if study_name is not None and not study_name.strip():
        raise InvalidArgumentError("`study_name` must not be empty (omit it for the default).")
    choose_attention(resolve_device(device), attn)  # a device or kernel this machine lacks: now
    check_source(config.corpus)  # a mistyped corpus path: before the model loads
    factory = OBJECTIVES.get_or_raise(config.objective)
    check_options(factory, config.target_length, dict(config.objective_options))
    check_sampler_dependencies([config.sampler])  # a missing extra fails before loading
    if config.pruner is not None:
        make_pruner(config.pruner, config.sampler)
    url = None
    if not isinstance(storage, optuna.storages.BaseStorage):
        # a SQLite or journal file is created only once the space is settled: a refused search
        # leaves no database behind
        url = resolve_storage_url(storage)
        storage = open_existing(url, heartbeat_interval=heartbeat_interval or None)
    name = study_name or config.default_study_name()
    try:
        stored = None if storage is None else optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        stored = None
    # The space is checked against the model's config before its weights load (minutes for a
    # 7B model): target vs trained length, the base stage, the λ cap.
    said = config.trained_length
    if model is not None and said is not None:  # a model the caller loaded: the user's word
        setattr(model.config, TRAINED_LENGTH_ATTR, said)
    model_config = model.config if model is not None else read_config(config.model,
                                                                      trained_length=said)  # fmt: skip
    if model_config is not None:
        check_supported(model_config)  # a refused family: one line, before any weight loads
    if model_config is None or not _has_rope(model_config):  # the load says what is wrong
        model, tokenizer = load_model(config.model, dtype=dtype, device=device, attn=attn,
                                      fuse=fuse, trained_length=said)  # fmt: skip
        model_config = model.config
    # another study named as a base or warm start is read from the same storage, which must hold it
    studies = [s for s in (config.base, config.warm_start) if isinstance(s, str) and s.startswith("study:")]
    reading = storage if storage is not None or not studies else make_storage(str(url), must_exist=True)
    base = None if config.base in (None, "config") else resolve_base(
        config.base, model_config=model_config, storage=reading
    )  # fmt: skip
    source, warm = config.warm_start, None
    if isinstance(source, str):  # a source is resolved once: the study keeps its record
        warm = resolve_base(source, storage=reading, param="warm_start")
    config, space, difference = config.settle(stored, model_config, base, warm)
    if model is None:
        model, tokenizer = load_model(config.model, dtype=dtype, device=device, attn=attn,
                                      fuse=fuse, trained_length=config.trained_length)  # fmt: skip
    options = dict(config.objective_options)
    length = config.sample_length or sample_length(factory, config.target_length, options)
    samples = load_samples(
        config.corpus, tokenizer, length, config.samples, config.seed,
        exclude=config.exclude_docs, interleave=config.draw == "kinds",
    )  # fmt: skip
    measure = factory(model, samples, space=space, progress=progress, **options)
    objective, constraint = measure, None
    if config.retrieval_keys:
        constraint = RetrievalConstraint(model, tokenizer, space=space, keys=config.retrieval_keys,
                                         length=config.target_length, form=config.passkey_form or "single")  # fmt: skip
        objective = constraint.wrap(measure)
    sampler = make_sampler(config.sampler, space=space, seed=config.effective_sampler_seed,
                           budget=budget or 1000, options=config.sampler_options,
                           constraints_func=constraint)  # fmt: skip
    if storage is None:  # the search is valid and its text read: now its database is created
        storage = make_storage(str(url), heartbeat_interval=heartbeat_interval or None)
    study = open_study(
        storage=storage, study_name=name, sampler=sampler,
        provenance=record.provenance_of(
            model_name=config.model, model=model, spec=space.spec,
            target_length=config.target_length, samples=samples, seed=config.seed,
            objective=config.objective,
        ),
        spec=space.spec, pruner=make_pruner(config.pruner or "none", config.sampler, sampler),
        config=config.to_dict(), difference=difference,
        seed_space=space if config.seed_all else None,
        direction=str(getattr(measure, "direction", "minimize")),
    )  # fmt: skip
    if isinstance(config.warm_start, dict) and enqueue_warm_start(study, space, config.warm_start):
        logger.info("warm start: the factors for %d tokens (%s) carried to %d",
                    config.warm_start["length"], source, config.target_length)  # fmt: skip
    return Search(config, study, model, tokenizer, objective, measure, space, progress)


def _has_rope(model_config: Any) -> bool:
    try:
        RopeSpec.from_config(model_config)
    except LongRopeOptError:
        return False
    return True


# ----- run_search -------------------------------------------------------------------------------


@dataclass
class SearchResult:
    """What a `run_search` call did.

    Attributes:
        study: The study (the search's whole state; `study.best_trial` is the best so far).
        config: The config as stored (a `base` source resolved to its record).
        finished: Trials finished by this call.
        seconds: Wall time of the trials.
    """

    study: optuna.Study
    config: SearchConfig
    finished: int
    seconds: float


def run_search(
    config: SearchConfig,
    *,
    storage: Any = None,
    study_name: str | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    rerank: int = 0,
    rerank_samples: int | None = None,
    guard_keys: int = 0,
    store_total: bool = True,
    graceful_interrupt: bool = False,
    **machine: Any,
) -> SearchResult:
    """Create or resume the study of `config` and run its stages: trials until the study holds
    `n_trials`, then the re-rank and the retrieval guard when asked.

    Rerunning with the same arguments continues the study; a study created with another config
    is refused (one line naming the first differing field). The config is stored in the study,
    so `SearchConfig.from_study` rebuilds the search anywhere (`longrope-opt worker`).

    Args:
        config: The search.
        storage: An Optuna storage or URL; default ``$LONGROPE_OPT_STORAGE`` or
            ``sqlite:///longrope.db``.
        study_name: Default: `SearchConfig.default_study_name`.
        n_trials: The study's total of finished (complete or pruned) trials, across runs and
            workers; None runs until `timeout`.
        timeout: Seconds for this call (0 creates or checks the study and runs nothing).
        rerank: After the trials, re-evaluate the `rerank` best trials at full fidelity on
            `rerank_samples` documents (`rerank_study`); 0 skips it. Re-ranked trials are
            not measured again.
        rerank_samples: Documents of the re-rank (default `config.samples`; the first
            `config.samples` are the search's own, none is held out).
        guard_keys: The retrieval guard (`guard_study`) on this many passkey prompts at the
            target length over the re-ranked trials, else the 3 best; 0 skips it.
        store_total: Record `n_trials` in the study as its total (what workers read).
        graceful_interrupt: The first Ctrl-C finishes the running trial, then stops.
        **machine: `prepare`'s machine settings: ``dtype``, ``device``, ``attn``, ``fuse``,
            ``heartbeat_interval``, ``progress``, and a loaded ``model`` and ``tokenizer``.

    Returns:
        A `SearchResult`.

    Example:
        >>> from longrope_opt.studies import SearchConfig, run_search
        >>> config = SearchConfig(target_length=16384, samples=3,
        ...                       sampler_options={"population_size": 8})
        >>> result = run_search(config, storage="sqlite:///longrope.db", n_trials=16)
        >>> result.study.best_value
    """
    stages = search_stages(n_trials, timeout=timeout, graceful_interrupt=graceful_interrupt,
                           store_total=store_total, rerank=rerank, rerank_samples=rerank_samples,
                           guard_keys=guard_keys)  # fmt: skip
    search = prepare(config, storage=storage, study_name=study_name, budget=n_trials, **machine)
    before = len(search.study.get_trials(deepcopy=False, states=FINISHED))
    seconds = run_stages(search, stages)
    done = len(search.study.get_trials(deepcopy=False, states=FINISHED)) - before
    return SearchResult(search.study, search.config, done, seconds["search"])

