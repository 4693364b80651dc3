"""`SearchConfig`: one search, defined once, stored in its study, rebuilt from it.

The CLI parses flags into a `SearchConfig`; `run_search` runs it; the study records it
(`longrope_opt.studies.record`), so a worker, `export` or a script rebuilds the same search
from the study alone, whatever flags or scripts created it. Machine settings (dtype, device,
fusion, heartbeat) are not part of a search: each worker picks its own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import ALIASES
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.objectives import check_passkey_form
from longrope_opt.rope import ATTENTION_RULES
from longrope_opt.rope import RopeSpec
from longrope_opt.samplers import EVOLUTION_SAMPLERS
from longrope_opt.samplers import PRUNERS
from longrope_opt.samplers import SAMPLERS
from longrope_opt.samplers import LongRoPESampler
from longrope_opt.space import PAPER_N_HAT
from longrope_opt.space import PAPER_SEEDS
from longrope_opt.space import SEED_NAMES
from longrope_opt.space import SHAPES
from longrope_opt.space import SearchSpace
from longrope_opt.space import attention_setting
from longrope_opt.space import n_hat_setting
from longrope_opt.studies._config_stored import legacy_fields
from longrope_opt.studies._config_stored import upgraded
from longrope_opt.studies._warm import check_warm_start


#: Version of the stored form; `from_dict` refuses a newer one.
CONFIG_VERSION = 1
#: How documents are drawn: ``kinds`` take turns (`load_samples`); ``order``: one source in seed
#: order, as studies made before kinds existed drew (read from their stored config).
DRAWS = ("kinds", "order")
#: Samplers that own a population (the population pruner and the retrieval constraint need one).
POPULATION_SAMPLERS = ("longrope", "longrope-adaptive")


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidArgumentError(f"`{name}` must be an integer >= {low}, got {value!r}.")
    return value


@dataclass(frozen=True)
class SearchConfig:
    """Everything that defines a search (not where or on what hardware it runs).

    Attributes:
        model: ``"smollm2-135m"``, a model directory, a ``.gguf`` file or a hub id.
        corpus: ``"builtin"``, a ``.txt`` file or folder, or a `datasets` name.
        samples: Documents the objective evaluates.
        seed: Chooses the documents; also the sampler's seed unless `sampler_seed` is set.
        target_length: L'.
        n_hat: ``"search"`` (the paper's set) or a fixed integer.
        attention: A rule from `longrope_opt.rope.ATTENTION_RULES`, ``"search"``, or a fixed t
            (a number, or its text).
        lambda_max: Highest λ (default 1.25·s; 1.25 for a recovery search; 2s for the
            critical space).
        space: ``"full"`` (every λ searched, the paper's space) or ``"critical"`` (LongRoPE2's
            critical dimension searched, λ from it on in [s, 2s]; `SearchSpace.shape`).
        critical_above: How far above theory the critical space's c may go (None: as far as
            below, 6); 0 keeps every λ at or above YaRN-cd's (`SearchSpace.critical_above`).
        recovery: A short-context recovery search (target within the trained window).
        base: A secondary search's base stage: ``"config"``, ``"study:NAME"``, a factor JSON
            path, or (once resolved by `run_search`) its record.
        sampler: A name in `longrope_opt.samplers.SAMPLERS`.
        sampler_seed: The sampler's seed when it differs from `seed` (comparisons).
        sampler_options: Keyword arguments of the evolution samplers (population size, ...).
        objective: A name in `longrope_opt.objectives.OBJECTIVES` (entry points included).
        objective_options: Keyword arguments of the objective factory.
        pruner: ``"none"``, ``"wilcoxon"`` (on per-sample reports) or ``"population"`` (a
            candidate stops reading documents once it cannot enter the population; the LongRoPE
            samplers only). None: the stored study's, else ``population`` with a sampler that
            keeps one (`POPULATION_SAMPLERS`), else ``none``.
        sample_length: Tokens each document must have (default: what the objective needs,
            e.g. the target length).
        exclude_docs: Document ids the search never uses (held out for evaluation).
        seed_all: Enqueue the space's seeds (PI/NTK/YaRN, or the critical space's) whatever
            the sampler, so seeded TPE, CMA-ES or NGOpt start where the evolution does.
        draw: ``"kinds"``: the corpus's kinds of text take turns, so several documents span
            them (``"builtin"`` is prose and code); ``"order"``: the order of studies made before.
            None: the stored study's, else ``"kinds"``.
        retrieval_keys: Passkey prompts of the retrieval constraint at the target length (0:
            none): a candidate that would enter the population must retrieve as many as the
            study's best seed (`longrope_opt.studies.RetrievalConstraint`).
        passkey_form: How the constraint's and the guard's passkeys are measured:
            ``"single"`` or ``"branched"`` (`longrope_opt.objectives.passkey_results`). None:
            the stored study's, else ``"single"``.
        trained_length: The length the checkpoint was trained or fine-tuned to when its config
            says otherwise (None: the config's; `longrope_opt.models.load_model`).
        seed_methods: The full space's seeds by name (`longrope_opt.space.SEED_NAMES`). None until
            `run_search` resolves it: a study keeps the seeds it was created with (the paper's
            PI/NTK/YaRN for studies made before this field); a new full-space first search gets
            PI, NTK, YaRN, YaRN-cd and NTK-cd (LongRoPE2's critical-dimension correction).
        warm_start: Factors to try first (progressive extension): a factor JSON (`export`,
            `extend`'s factors.json) or ``"study:NAME"``, carried to `target_length`
            (`longrope_opt.studies.enqueue_warm_start`); stored resolved. None: the stored one.
        version: Version of this form.
    """

    model: str = "smollm2-135m"
    corpus: str = "builtin"
    samples: int = 2
    seed: int = 0
    target_length: int = 16384
    n_hat: int | str = "search"
    attention: str = "longrope"
    lambda_max: float | None = None
    space: str = "full"
    critical_above: int | None = None
    recovery: bool = False
    base: str | dict[str, Any] | None = None
    sampler: str = "longrope"
    sampler_seed: int | None = None
    sampler_options: dict[str, Any] = field(default_factory=dict)
    objective: str = "perplexity"
    objective_options: dict[str, Any] = field(default_factory=dict)
    pruner: str | None = None
    sample_length: int | None = None
    exclude_docs: list[str] = field(default_factory=list)
    seed_all: bool = False
    draw: str | None = None
    retrieval_keys: int = 0
    passkey_form: str | None = None
    seed_methods: tuple[str, ...] | None = None
    trained_length: int | None = None
    warm_start: str | dict[str, Any] | None = None
    version: int = CONFIG_VERSION

    def __post_init__(self) -> None:
        _int("samples", self.samples, 1)
        _int("seed", self.seed, 0)
        if self.seed_methods is not None:
            methods = self.seed_methods
            seeds = (methods,) if isinstance(methods, str) else tuple(methods)
            if not seeds or any(n not in SEED_NAMES for n in seeds) or len(set(seeds)) < len(seeds):
                raise InvalidArgumentError(
                    f"`seed_methods` must be distinct names among {', '.join(SEED_NAMES)}, "
                    f"got {', '.join(map(str, seeds)) or 'none'}."
                )
            object.__setattr__(self, "seed_methods", seeds)
        _int("target_length", self.target_length, 2)
        if self.trained_length is not None:
            _int("trained_length", self.trained_length, 2)
        if self.sampler == "longrope" and "operators" not in (self.sampler_options or {}):
            # written out, so a study made now says which operators it ran (a study stored
            # without it ran the paper's: `from_dict`)
            options = {**(self.sampler_options or {}), "operators": "surrogate"}
            object.__setattr__(self, "sampler_options", options)
        if self.sampler_seed is not None:
            _int("sampler_seed", self.sampler_seed, 0)
        if self.sample_length is not None:
            _int("sample_length", self.sample_length, 2)
        object.__setattr__(self, "exclude_docs", [str(d) for d in self.exclude_docs])
        if not isinstance(self.model, str) or not self.model:
            raise InvalidArgumentError(f"`model` must be a non-empty name, got {self.model!r}.")
        if not isinstance(self.corpus, str) or not self.corpus:
            raise InvalidArgumentError(f"`corpus` must be a non-empty name, got {self.corpus!r}.")
        object.__setattr__(self, "n_hat", n_hat_setting(self.n_hat))
        object.__setattr__(self, "attention", attention_setting(self.attention))
        if self.lambda_max is not None and not (
            isinstance(self.lambda_max, (int, float)) and math.isfinite(self.lambda_max)
        ):
            raise InvalidArgumentError(
                f"`lambda_max` must be a finite number > 1, got {self.lambda_max!r}."
            )
        if self.space not in SHAPES:
            raise InvalidArgumentError(
                f"`space` must be one of {list(SHAPES)}, got {self.space!r}."
            )
        if self.critical_above is not None:
            _int("critical_above", self.critical_above, 0)
            if self.space != "critical":
                raise InvalidArgumentError(
                    f"`critical_above` needs `space` 'critical', got `space` {self.space!r}."
                )
        SAMPLERS.check(self.sampler)
        if self.sampler in EVOLUTION_SAMPLERS and isinstance(self.sampler_options, dict):
            try:
                LongRoPESampler.check_options(**self.sampler_options)
            except InvalidArgumentError as exc:  # the option's name is the sampler's parameter
                raise InvalidArgumentError(f"`sampler_options`: {exc}") from None
        OBJECTIVES.check(self.objective)
        if self.pruner is not None and self.pruner not in PRUNERS:
            raise InvalidArgumentError(
                f"`pruner` must be one of {list(PRUNERS)}, got {self.pruner!r}."
            )
        if self.draw is not None and self.draw not in DRAWS:
            raise InvalidArgumentError(f"`draw` must be one of {list(DRAWS)}, got {self.draw!r}.")
        _int("retrieval_keys", self.retrieval_keys, 0)
        if self.passkey_form is not None:
            check_passkey_form(self.passkey_form)
        check_warm_start(self.warm_start, space=self.space, base=self.base, recovery=self.recovery)
        for name, on in (("pruner 'population'", self.pruner == "population"),
                         ("`retrieval_keys`", self.retrieval_keys > 0)):  # fmt: skip
            if on and self.sampler not in POPULATION_SAMPLERS:
                raise InvalidArgumentError(
                    f"{name} needs a sampler with a population ({', '.join(POPULATION_SAMPLERS)}), "
                    f"got `sampler` {self.sampler!r}."
                )
        for name in ("sampler_options", "objective_options"):
            if not isinstance(getattr(self, name), dict):
                raise InvalidArgumentError(
                    f"`{name}` must be a dict, got {getattr(self, name)!r}."
                )
        if self.version != CONFIG_VERSION:
            raise InvalidArgumentError(
                f"search config version {self.version!r} is not {CONFIG_VERSION}: this study was "
                "written by another release of longrope-opt."
            )

    # ----- stored form -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the study stores)."""
        out = dataclasses.asdict(self)
        out["seed_methods"] = None if self.seed_methods is None else list(self.seed_methods)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        """Inverse of `to_dict`; unknown keys are an error (a newer release wrote them)."""
        data = upgraded(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgumentError(
                f"search config has unknown keys {unknown}: written by a newer longrope-opt?"
            )
        return cls(**data)

    @classmethod
    def from_legacy(cls, old: dict[str, Any]) -> SearchConfig:
        """The config of a study written before `SearchConfig` (argparse keys)."""
        return cls(**legacy_fields(old))

    @classmethod
    def from_study(cls, study: Any) -> SearchConfig:
        """The search a study was created with (from the current key or the legacy one).

        Raises:
            InvalidArgumentError: The study was not created by `run_search` / `longrope-opt
                search` (a plain Optuna study has no config to rebuild).
        """
        stored = record.read_config(study)
        if stored is None:
            raise InvalidArgumentError(
                f"study {study.study_name!r} was not created by `run_search` (it records no "
                "search config), so its search cannot be rebuilt."
            )
        config, legacy = stored
        return cls.from_legacy(config) if legacy else cls.from_dict(config)

    # ----- what it builds --------------------------------------------------------------------

    def resolved(self) -> SearchConfig:
        """The same search with local paths made absolute (model, corpus, a base file), so a
        worker started in another directory finds them; names that are not paths stay as they
        are."""

        def absolute(value: Any) -> Any:
            if not isinstance(value, str) or value in ("builtin", "config", *ALIASES):
                return value
            if value.startswith("study:"):
                return value
            path = Path(value).expanduser()
            return str(path.resolve()) if path.exists() else value

        corpus = ",".join(absolute(part) for part in self.corpus.split(","))  # several sources
        # "config" (search on top of the model's own RoPE, e.g. an export's factors) is what
        # every search does now: the spec holds the checkpoint's RoPE, so no base is needed.
        base = None if self.base == "config" else absolute(self.base)
        return dataclasses.replace(self, model=absolute(self.model), corpus=corpus, base=base)

    def settle(
        self, stored: Any, model_config: Any, base: tuple[Any, int] | None = None, warm: Any = None
    ) -> tuple[SearchConfig, SearchSpace, tuple[str, Any, Any] | None]:
        """This search as its study stores it, its space, and how it differs from the search
        the study was created with.

        Local paths become absolute (a worker may start anywhere), open fields take the
        stored study's values (`with_stored`), a base stage becomes its record.

        Args:
            stored: The existing study (None: a new one; a study made without a config is new
                to its config).
            model_config: The model's transformers config (its RoPE).
            base: ``(factors, length)`` of the resolved base stage (`resolve_base`), if any.
            warm: ``(factors, length)`` of the resolved warm start, if any.

        Returns:
            ``(config, space, difference)``: `difference` is `first_difference` against the
            stored search (None: the same search, or a new study).
        """
        before = None
        if stored is not None and record.read_config(stored) is not None:
            before = SearchConfig.from_study(stored)
        config = self.resolved().with_stored(before)
        if base is not None:
            config = dataclasses.replace(config, base=record.base_record(*base))
        if warm is not None:
            config = dataclasses.replace(config, warm_start=record.base_record(*warm))
        space = config.build_space(RopeSpec.from_config(model_config), base)
        difference = None if before is None else before.resolved().first_difference(config)
        return config, space, difference

    def with_stored(self, stored: SearchConfig | None) -> SearchConfig:
        """This search with the fields left open (None: `seed_methods`, `draw`, `pruner`,
        `passkey_form`, `warm_start`) resolved: the stored study's, else the default of a new
        study. A study keeps what it was created with, so a newer release's defaults never
        change a search mid-way."""
        out = self
        if out.passkey_form is None:
            form = stored.passkey_form if stored is not None else None
            out = dataclasses.replace(out, passkey_form=form or "single")
        if out.draw is None:
            out = dataclasses.replace(out, draw=stored.draw if stored is not None else "kinds")
        if out.warm_start is None and stored is not None:
            out = dataclasses.replace(out, warm_start=stored.warm_start)
        if out.pruner is None:
            new = "population" if out.sampler in POPULATION_SAMPLERS else "none"
            out = dataclasses.replace(out, pruner=stored.pruner if stored is not None else new)
        if out.seed_methods is not None:
            return out
        if stored is not None and stored.seed_methods is not None:
            return dataclasses.replace(out, seed_methods=stored.seed_methods)
        if out.space != "full" or out.recovery or out.base is not None:
            return dataclasses.replace(out, seed_methods=PAPER_SEEDS)
        # The same seeds for every sampler (a comparison's `seed_all` gives each the same
        # starting points); with a smaller population the last ones open the next generation.
        return dataclasses.replace(out, seed_methods=SEED_NAMES)

    @property
    def effective_sampler_seed(self) -> int:
        """The seed the sampler gets."""
        return self.seed if self.sampler_seed is None else self.sampler_seed

    def default_study_name(self) -> str:
        """``<model>-<target length>``."""
        return f"{self.model.replace('/', '_')}-{self.target_length}"

    def build_space(self, spec: RopeSpec, base: tuple[Any, int] | None = None) -> SearchSpace:
        """The `SearchSpace` of this search for a model with RoPE `spec`.

        Args:
            spec: The model's RoPE.
            base: ``(factors, length)`` of a secondary search's resolved base stage.
        """
        recovery = self.recovery
        if recovery != (self.target_length <= spec.original_length):
            if recovery:
                raise InvalidArgumentError(
                    f"`target_length` must be <= the trained length {spec.original_length} "
                    f"with `recovery`, got {self.target_length}."
                )
            if self.target_length <= spec.original_length:
                raise InvalidArgumentError(
                    f"`target_length` must be > the trained length {spec.original_length}, got "
                    f"{self.target_length} (for short factors within the window, set `recovery`)."
                )
        if recovery and (base is not None or self.base is not None):
            raise InvalidArgumentError(
                "`base` and `recovery` exclude each other: short factors are absolute."
            )
        if self.lambda_max is not None and self.lambda_max <= 1.0:
            raise InvalidArgumentError(
                f"`lambda_max` must be > 1.0 (the lowest λ), got {self.lambda_max}."
            )
        n_hat = PAPER_N_HAT if self.n_hat == "search" else (int(self.n_hat),)
        rule, value = self.attention, None
        if rule != "search" and rule not in ATTENTION_RULES:
            rule, value = "none", float(rule)
        scaling, length = base if base is not None else (None, None)
        return SearchSpace(
            spec,
            self.target_length,
            n_hat=n_hat,
            attention=rule,
            attention_value=value,
            lambda_high=self.lambda_max,
            base=scaling,
            base_length=length,
            shape=self.space,
            critical_above=self.critical_above,
            seeds=self.seed_methods or PAPER_SEEDS,
        )

    def first_difference(self, other: SearchConfig) -> tuple[str, Any, Any] | None:
        """``(field, self's value, other's value)`` of the first field that differs, or None."""
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                return f.name, mine, theirs
        return None
