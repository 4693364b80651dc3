"""The rows of a validation table: the classic methods at each length, and candidates (a study's
winners and top trials, factor files)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import optuna

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.rope import METHODS
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.space import SearchSpace
from longrope_opt.studies import guarded_trial
from longrope_opt.studies import load_factors
from longrope_opt.studies import ranked_trials
from longrope_opt.studies import record
from longrope_opt.studies import reranked_best
from longrope_opt.studies import space_of_study


#: The classic rows, in table order.
CLASSIC = ("none", "pi", "ntk", "yarn", "yarn-cd", "ntk-cd")


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of a validation table.

    Attributes:
        name: Its label (``yarn-cd``, ``4x-floor:guarded``, a factor file's stem, ...).
        scaling: What is measured (None: the model as it is); for a classic row, the method at
            the row's length.
        classic: A classic method (candidates are compared with the best of these).
        source: Where a candidate came from (study, trial and the rule that chose it; or a file).
        in_sample: A study candidate's value on the study's own documents over each of the
            study's seeds' values on them, by seed name (``{"yarn-cd": 0.976, ...}``): what the
            search saw, to set beside the held-out ratio.
    """

    name: str
    scaling: RopeScaling | None
    classic: bool = False
    source: str = ""
    in_sample: dict[str, float] = dataclasses.field(default_factory=dict)


def classic_rows(spec: RopeSpec, length: int) -> list[Row]:
    """none, PI, NTK, YaRN (each with its own attention scale), and YaRN / NTK with LongRoPE2's
    critical-dimension correction (with the LongRoPE attention scale, as a critical-space
    search's fixed rule), at `length`."""
    t = SearchSpace(spec, length).fixed_attention_scale
    assert t is not None  # the default space's fixed rule (LongRoPE's t)
    rows = [Row("none", None, classic=True)]
    rows += [Row(m, METHODS[m](spec, length), classic=True) for m in ("pi", "ntk", "yarn")]
    critical = SearchSpace(spec, length, shape="critical")
    for name, params in critical.seed_params()[:2]:  # yarn-cd, ntk-cd
        sc = critical.to_scaling(params)
        rows.append(Row(name, RopeScaling(sc.factors, 0, t, method=name), classic=True))
    return rows


def study_rows(study: optuna.Study, *, top: int = 0) -> list[Row]:
    """A study's candidates: its best trial, its re-ranked and guarded winners (when it has
    them), and its `top` best trials; a trial chosen by several rules is one row.

    Raises:
        InvalidArgumentError: `top` < 0, or the study has no complete trial.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise InvalidArgumentError(f"`top` must be an integer >= 0, got {top!r}.")
    ranked = ranked_trials(study)  # best first, in the study's direction
    if not ranked:
        raise InvalidArgumentError(f"study {study.study_name!r} has no completed trial.")
    rules: dict[int, list[str]] = {}
    guarded = guarded_trial(study)
    if guarded is not None:
        rules.setdefault(guarded.number, []).append("guarded")
    reranked = reranked_best(study)
    if reranked is not None:
        rules.setdefault(reranked[1].number, []).append("re-ranked")
    rules.setdefault(ranked[0].number, []).append("best")
    for t in ranked[:top]:
        rules.setdefault(t.number, []).append(f"top {ranked.index(t) + 1}")
    trials = study.get_trials(deepcopy=False)
    seeds = {t.user_attrs["seed"]: t for t in ranked if t.user_attrs.get("seed")}
    rows = []
    for number, labels in rules.items():
        trial = trials[number]
        scaling = space_of_study(study, trial).to_scaling(trial.params)
        name = f"{study.study_name}:{labels[0].replace(' ', '')}"
        seed = trial.user_attrs.get("seed")
        why = "=".join(labels) + (f", the {seed} seed" if seed else "")
        if labels[0] == "guarded":
            passed = record.read_guard(study).get("reference") != number
            why += "" if passed else ", no candidate passed the guard"
        in_sample = {
            m: float(trial.value) / float(t.value)
            for m, t in seeds.items()
            if trial.value is not None and t.value
        }  # fmt: skip
        rows.append(Row(name, scaling, source=f"study {study.study_name!r} trial {number} ({why})",
                        in_sample=in_sample))  # fmt: skip
    return rows


def factor_rows(paths: Sequence[str | Path]) -> list[Row]:
    """One row per factor file (`export`'s JSON), named by its stem."""
    rows = []
    for path in paths:
        rows.append(Row(Path(path).stem, load_factors(path), source=f"file {str(path)!r}"))
    names = [r.name for r in rows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"`factors` files must have distinct names, got {twice[0]!r} twice.")
    return rows


def check_names(rows: Sequence[Row]) -> None:
    """Candidate names must differ from each other and from the classic rows."""
    seen = set(CLASSIC)
    for row in rows:
        if row.name in seen:
            raise InvalidArgumentError(
                f"two rows are named {row.name!r} (candidates must not reuse a classic row's "
                "name or each other's); rename a factor file."
            )
        seen.add(row.name)

