"""One table from validations of several models on the same documents and prompts.

`validate` measures rows on one model (the store keys every number by the model's fingerprint).
A fine-tuned comparison is rows of different models: the base model's classic and searched rows,
and each fine-tuned model as it loads. Each is measured by its own `validate` call on the same
documents, lengths and prompts; `merge_validations` joins them so that `summarize` pairs every
row with the reference on the same documents (the intervals stay paired). `join_tables` does
the same for tables already written (`validate --from-json A.json --from-json B.json`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation._validate import Validation


def merge_validations(parts: Sequence[Validation], *, classic: Sequence[str] = ()) -> Validation:
    """The rows of `parts` as one validation (the first part's rows first).

    Args:
        parts: Validations of the same documents, lengths, passkey prompts and form.
        classic: Rows of the parts that count as formula rows (a model fine-tuned from a
            formula): the reference is the best of these and the first part's classic rows.

    Raises:
        InvalidArgumentError: The parts measured different documents, lengths or prompts, or
            two parts have a row of the same name.
    """
    if not parts:
        raise InvalidArgumentError("`parts` must hold at least one validation, got 0.")
    first = parts[0]
    same = ("lengths", "documents", "keys", "passkey_seed", "passkey_form")
    for part in parts[1:]:
        differs = [f for f in same if getattr(part, f) != getattr(first, f)]
        if differs:
            raise InvalidArgumentError(
                f"validations to merge must share their {differs[0]}: {getattr(first, differs[0])!r} "
                f"and {getattr(part, differs[0])!r}."
            )
    rows = [r for part in parts for r in part.rows]
    twice = sorted({r for r in rows if rows.count(r) > 1})
    if twice:
        raise InvalidArgumentError(f"row {twice[0]!r} is in two validations: rename one.")
    unknown = [c for c in classic if c not in rows]
    if unknown:
        raise InvalidArgumentError(f"`classic` names no merged row: {unknown[0]!r}.")

    def joined(name: str) -> dict:
        return {n: {r: v for part in parts for r, v in getattr(part, name)[n].items()}
                for n in first.lengths}  # fmt: skip

    return Validation(
        lengths=list(first.lengths), documents=list(first.documents), keys=first.keys,
        passkey_seed=first.passkey_seed, rows=rows, classic=list(dict.fromkeys([*first.classic, *classic])),
        sources={k: v for part in parts for k, v in part.sources.items()},
        ppl=joined("ppl"), passkey=joined("passkey"), depths=dict(first.depths),
        paths=joined("paths"), path=first.path,
        model=" + ".join(dict.fromkeys(part.model for part in parts)),
        measured=sum(part.measured for part in parts),
        in_sample={k: v for part in parts for k, v in part.in_sample.items()},
        passkey_form=first.passkey_form,
    )  # fmt: skip


def join_tables(parts: Sequence[Validation]) -> Validation:
    """Tables written by separate `validate` runs on the same documents and prompts, as one.

    A fine-tuned comparison measured over several sittings or machines (one fine-tuned model a
    run, each beside the rows before fine-tuning) repeats those rows in every table: a row that
    an earlier table holds with the same numbers is kept once. Rows fine-tuned from a formula
    stay formula rows (each table's own ``classic``).

    Raises:
        InvalidArgumentError: The tables measured different documents, lengths or prompts, or
            hold a row of the same name with other numbers.
    """
    if not parts:
        raise InvalidArgumentError("`parts` must hold at least one validation, got 0.")
    kept, seen = [parts[0]], set(parts[0].rows)
    for part in parts[1:]:
        repeated = [r for r in part.rows if r in seen]
        for row in repeated:
            owner = next(p for p in kept if row in p.rows)
            if any(_numbers(owner, row, n) != _numbers(part, row, n) for n in part.lengths):
                raise InvalidArgumentError(
                    f"row {row!r} is in two tables with other numbers: measured on other "
                    "models or text; rename one or measure them in one run."
                )
        rows = [r for r in part.rows if r not in seen]
        if not rows:
            continue
        kept.append(_only(part, rows))
        seen.update(rows)
    if len(kept) == 1:
        return kept[0]
    classic = [r for part in kept[1:] for r in part.classic if r in part.rows]
    return merge_validations(kept, classic=classic)


def _numbers(part: Validation, row: str, length: int) -> tuple:
    return (part.ppl.get(length, {}).get(row), part.passkey.get(length, {}).get(row))


def _only(part: Validation, rows: list[str]) -> Validation:
    """`part` with `rows` alone (and their numbers)."""

    def keep(table: dict) -> dict:
        return {n: {r: v for r, v in by_row.items() if r in rows} for n, by_row in table.items()}

    return dataclasses.replace(
        part, rows=list(rows), classic=[r for r in part.classic if r in rows],
        sources={k: v for k, v in part.sources.items() if k in rows},
        ppl=keep(part.ppl), passkey=keep(part.passkey), paths=keep(part.paths),
        in_sample={k: v for k, v in part.in_sample.items() if k in rows},
    )  # fmt: skip
