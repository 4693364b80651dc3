"""`run_search`: the library entry point every search goes through (CLI, workers, compare, scripts)."""

from __future__ import annotations

import dataclasses
import logging
import time
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
from longrope_opt.objectives import check_options
from longrope_opt.objectives import sample_length
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import make_sampler
from longrope_opt.studies._config import SearchConfig
from longrope_opt.studies._guard import guard_study
from longrope_opt.studies._provenance import provenance_of
from longrope_opt.studies._pruning import make_pruner
from longrope_opt.studies._rerank import rerank_study
from longrope_opt.studies._retrieval import RetrievalConstraint
from longrope_opt.studies._run import open_study
from longrope_opt.studies._run import run_study
from longrope_opt.studies._stages import resolve_base
from longrope_opt.studies._storage import make_storage
from longrope_opt.studies._storage import resolve_storage_url


logger = logging.getLogger(__name__)


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
    dtype: str = "auto",
    device: str = "auto",
    attn: str | None = None,
    fuse: bool = True,
    heartbeat_interval: int | None = 60,
    store_total: bool = True,
    progress: bool = True,
    graceful_interrupt: bool = False,
    model: Any = None,
    tokenizer: Any = None,
    rerank: int = 0,
    rerank_samples: int | None = None,
    guard_keys: int = 0,
) -> SearchResult:
    """Create or resume the study of `config` and run it until it holds `n_trials` trials.

    Rerunning with the same arguments continues the study; a study created with another config
    is refused (one line naming the first differing flag). The config is stored in the study
    (`longrope_opt.studies.record`), so `SearchConfig.from_study` rebuilds the search anywhere.

    Args:
        config: The search.
        storage: An Optuna storage or URL; default ``$LONGROPE_OPT_STORAGE`` or
            ``sqlite:///longrope.db``.
        study_name: Default: `SearchConfig.default_study_name`.
        n_trials: The study's total of finished (complete or pruned) trials, across runs and
            workers; None runs until `timeout`.
        timeout: Seconds for this call (0 creates or checks the study and runs nothing).
        dtype: Compute path on this machine (``auto``: the fastest, see `load_model`).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` for this process (not part of the
            search: each worker picks its own; one worker per GPU via CUDA_VISIBLE_DEVICES).
        attn: Attention kernel (None: the best available, see `load_model`).
        fuse: Compile the element-wise work (faster long forwards).
        heartbeat_interval: Trial heartbeat in seconds (None or 0: off).
        store_total: Record `n_trials` in the study as its total (what workers read).
        progress: Progress bars.
        graceful_interrupt: The first Ctrl-C finishes the running trial, then stops.
        model: A loaded model for `config.model` (comparisons reuse one across studies).
        tokenizer: Its tokenizer (with `model`).
        rerank: After the trials, re-evaluate the study's `rerank` best trials at full fidelity
            (perplexity of `config.samples` search documents at the full target length) and
            store the values in the study record; `study_winner` and `export_best` then
            choose the winner on them. For a search on a cheap proxy (``mode="skip"``,
            ``needle-ppl``); 0 (default) skips it. Already re-ranked trials are not re-run.
        rerank_samples: Documents of the re-rank (default `config.samples`): more than the
            search's own, so a full-length search's winner is chosen on more text (the
            first `config.samples` of them are the search's; none is held out).
        guard_keys: After the re-rank, the retrieval guard (`guard_study`) on this many
            passkey prompts at the target length: the best candidate that retrieves as many as
            the study's best seed becomes the exported winner (the re-ranked trials, else the
            3 best, best first). 0 (default) skips it.

    Returns:
        A `SearchResult`.

    Example:
        >>> from longrope_opt.studies import SearchConfig, run_search
        >>> config = SearchConfig(target_length=16384, samples=1,
        ...                       sampler_options={"population_size": 8})
        >>> result = run_search(config, storage="sqlite:///longrope.db", n_trials=16)
        >>> result.study.best_value
    """

    if n_trials is not None and (isinstance(n_trials, bool) or n_trials < 1):
        raise InvalidArgumentError(f"`n_trials` must be >= 1, got {n_trials}.")
    for name, value, low in (("rerank", rerank, 0), ("guard_keys", guard_keys, 0),
                             ("rerank_samples", 1 if rerank_samples is None else rerank_samples, 1)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")
    if timeout is not None and not timeout >= 0:
        raise InvalidArgumentError(f"`timeout` must be >= 0 seconds, got {timeout}.")
    if study_name is not None and not study_name.strip():
        raise InvalidArgumentError("`study_name` must not be empty (omit it for the default).")

    choose_attention(resolve_device(device), attn)  # a device or kernel this machine lacks: now
    check_source(config.corpus)  # a mistyped corpus path: before the model loads
    # Local paths are stored absolute: workers may start in any directory.
    config = config.resolved()
    factory = OBJECTIVES.get_or_raise(config.objective)
    check_options(factory, config.target_length, dict(config.objective_options))
    if config.pruner is not None:  # a missing extra fails before loading
        make_pruner(config.pruner, config.sampler)
    if not isinstance(storage, optuna.storages.BaseStorage):
        url = resolve_storage_url(storage)
        storage = make_storage(url, heartbeat_interval=heartbeat_interval or None)
    name = study_name or config.default_study_name()
    config = config.with_stored(_stored_config(storage, name))
    if model is None:
        # Validate the space against the model's config before its weights load (minutes for
        # a 7B model): target length vs trained length, the base stage, the λ cap.
        pre = read_config(config.model)
        if pre is not None and _has_rope(pre):
            _space_of(config, pre, storage)
        model, tokenizer = load_model(
            config.model, dtype=dtype, device=device, attn=attn, fuse=fuse
        )
    config, space = _space_of(config, model.config, storage)
    spec = space.spec
    options = dict(config.objective_options)
    length = config.sample_length or sample_length(factory, config.target_length, options)
    samples = load_samples(
        config.corpus, tokenizer, length, config.samples, config.seed,
        exclude=config.exclude_docs, interleave=config.draw == "kinds",
    )  # fmt: skip
    constraint = None
    if config.retrieval_keys:
        constraint = RetrievalConstraint(
            model, tokenizer, keys=config.retrieval_keys, length=config.target_length
        )
    sampler = make_sampler(
        config.sampler,
        space=space,
        seed=config.effective_sampler_seed,
        budget=n_trials or 1000,
        options=config.sampler_options,
        constraints_func=constraint,
    )
    pruner = make_pruner(config.pruner or "none", config.sampler, sampler)
    stored = _stored_config(storage, name)
    difference = None if stored is None else stored.resolved().first_difference(config)
    objective = factory(model, samples, space=space, progress=progress, **options)
    if constraint is not None:
        objective = constraint.wrap(objective, sampler)
    study = open_study(
        storage=storage,
        study_name=name,
        sampler=sampler,
        provenance=provenance_of(
            model_name=config.model,
            model=model,
            spec=spec,
            target_length=config.target_length,
            samples=samples,
            seed=config.seed,
            objective=config.objective,
        ),
        spec=spec,
        pruner=pruner,
        config=config.to_dict(),
        difference=difference,
        seed_space=space if config.seed_all else None,
        direction=str(getattr(objective, "direction", "minimize")),
    )
    stored_total = record.read_total(study)
    if store_total and n_trials is not None:
        if stored_total is not None and n_trials < stored_total:
            # Lowering it would silently stop the study's other workers early.
            logger.warning(
                "`n_trials` %d is below study %r's total of %d trials; the total stays %d.",
                n_trials, name, stored_total, stored_total,
            )  # fmt: skip
        else:
            record.write_total(study, n_trials)  # the study's total, for its workers
    start = time.perf_counter()
    done = 0
    if timeout != 0:
        done = run_study(
            study,
            objective,
            n_trials=n_trials,
            timeout=timeout,
            show_progress_bar=progress,
            graceful_interrupt=graceful_interrupt,
        )
    seconds = time.perf_counter() - start
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if rerank and complete:
        if not callable(getattr(objective, "full_fidelity", None)):
            raise InvalidArgumentError(
                f"`rerank` needs an objective with `full_fidelity` (an `Objective`); "
                f"{type(objective).__name__} has none."
            )
        _rerank(study, config, objective, tokenizer, rerank, rerank_samples, progress)
    if guard_keys and complete:
        guard_study(study, model, tokenizer, keys=guard_keys, top=max(rerank, 3),
                    progress=progress)  # fmt: skip
    return SearchResult(study, config, done, seconds)


def _rerank(
    study: optuna.Study, config: SearchConfig, objective: Any, tokenizer: Any, top: int,
    samples: int | None, progress: bool,
) -> None:
    # Full fidelity on more text: the objective's own full-length measure (perplexity for the
    # built-in ones) on whole target-length windows of the search's documents and more (held-out
    # ones stay excluded).
    docs = load_samples(
        config.corpus, tokenizer, config.target_length, samples or config.samples, config.seed,
        exclude=config.exclude_docs, interleave=config.draw == "kinds",
    )  # fmt: skip
    rerank_study(study, objective.full_fidelity(docs), top=top, progress=progress, documents=docs)


def _has_rope(model_config: Any) -> bool:
    try:
        RopeSpec.from_config(model_config)
    except LongRopeOptError:
        return False  # the load itself says what is wrong, naming the model type
    return True


def _space_of(config: SearchConfig, model_config: Any, storage: Any) -> tuple[SearchConfig, Any]:
    # The base stage resolved (a record, what workers read) and the space it defines.
    spec = RopeSpec.from_config(model_config)
    base = None
    if config.base is not None:
        source = config.base
        base = (
            record.base_from_record(source)
            if isinstance(source, dict)
            else resolve_base(source, model_config=model_config, storage=storage)
        )
        config = dataclasses.replace(config, base=record.base_record(*base))
    return config, config.build_space(spec, base)


def _stored_config(storage: Any, name: str) -> SearchConfig | None:
    """The search the existing study `name` records (None: no such study, or none recorded)."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    if record.read_config(study) is None:
        return None  # made by a script without a config: its provenance is still checked
    return SearchConfig.from_study(study)
