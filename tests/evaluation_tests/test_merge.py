"""`merge_validations`: rows of several models' validations as one table, paired by document."""

from __future__ import annotations

import dataclasses

import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import Validation
from longrope_opt.evaluation import merge_validations
from longrope_opt.evaluation import summarize


def _part(rows: list[str], classic: list[str], ppl: dict[str, list[float]], model: str) -> Validation:
    return Validation(
        lengths=[256], documents=["a", "b", "c"], keys=2, passkey_seed=0, rows=rows,
        classic=classic, sources={r: model for r in rows}, ppl={256: ppl},
        passkey={256: {r: [True, False] for r in rows}}, depths={256: [0.1, 0.9]},
        paths={256: {r: ["float32"] for r in rows}}, path="float32", model=model,
    )  # fmt: skip


def test_merged_rows_are_judged_against_the_best_formula_of_either_model() -> None:
    base = _part(["yarn-cd", "searched"], ["yarn-cd"],
                 {"yarn-cd": [10.0, 11.0, 12.0], "searched": [9.5, 10.5, 11.5]}, "base")  # fmt: skip
    tuned = _part(["ft-yarn-cd"], [], {"ft-yarn-cd": [8.0, 9.0, 10.0]}, "ft-yarn-cd")
    searched = _part(["ft-searched"], [], {"ft-searched": [7.8, 8.9, 9.7]}, "ft-searched")
    merged = merge_validations([base, tuned, searched], classic=["ft-yarn-cd"])
    assert merged.rows == ["yarn-cd", "searched", "ft-yarn-cd", "ft-searched"]
    assert merged.classic == ["yarn-cd", "ft-yarn-cd"]
    summary = summarize(merged)
    assert summary.reference[256] == "ft-yarn-cd"  # the best formula is the fine-tuned one
    assert summary.stats[256]["ft-searched"].ratio < 1 < summary.stats[256]["yarn-cd"].ratio


def test_parts_must_share_documents_and_prompts_and_not_rows() -> None:
    base = _part(["none"], ["none"], {"none": [1.0, 2.0, 3.0]}, "base")
    other = dataclasses.replace(_part(["x"], [], {"x": [1.0, 2.0, 3.0]}, "m"), documents=["a", "b", "d"])
    with pytest.raises(InvalidArgumentError, match="must share their documents"):
        merge_validations([base, other])
    with pytest.raises(InvalidArgumentError, match="row 'none' is in two validations"):
        merge_validations([base, base])
    with pytest.raises(InvalidArgumentError, match="`classic` names no merged row: 'y'"):
        merge_validations([base], classic=["y"])
