"""Verdicts with a practical margin: dominates / equivalent / not distinguishable / worse, each with
retrieval better, equal or worse, on validations made of chosen numbers (no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.evaluation import Validation
from longrope_opt.evaluation import documents_needed
from longrope_opt.evaluation import format_summary
from longrope_opt.evaluation import summarize


N = 16384
KEYS = 20


def _validation(ratios: list[float], *, ref_keys: int = 14, cand_keys: int = 14) -> Validation:
    """A reference row and one candidate whose per-document perplexity ratios are `ratios`;
    passkeys: the reference retrieves the first `ref_keys` prompts, the candidate `cand_keys`
    (a loss when it retrieves fewer of the reference's)."""
    ref = [10.0 + d for d in range(len(ratios))]
    return Validation(
        lengths=[N], documents=[f"d{i}" for i in range(len(ratios))], keys=KEYS,
        passkey_seed=0, rows=["yarn-cd", "cand"], classic=["yarn-cd"], sources={},
        ppl={N: {"yarn-cd": ref, "cand": [r * p for r, p in zip(ratios, ref)]}},
        passkey={N: {"yarn-cd": [i < ref_keys for i in range(KEYS)],
                     "cand": [i < cand_keys for i in range(KEYS)]}},
        depths={N: list(np.linspace(0, 1, KEYS))}, paths={N: {"yarn-cd": ["f32"], "cand": ["f32"]}},
        path="f32", model="m",
    )  # fmt: skip


def _spread(center: float, half: float, n: int = 8) -> list[float]:
    # ratios whose mean log is log(center), spread ± half (symmetric, so the bootstrap
    # interval is narrow when `half` is small)
    offsets = np.linspace(-half, half, n)
    return [center * math.exp(o) for o in offsets]


# (ratios, retrieval: candidate keys vs the reference's 14) -> verdict
CASES = {
    "inside the margin, retrieval equal": (_spread(1.002, 0.001), 14, "equivalent"),
    "inside the margin, retrieval better": (_spread(0.997, 0.001), 19, "equivalent"),
    "inside the margin, retrieval worse": (_spread(1.0, 0.001), 4, "worse"),
    "below the margin, retrieval equal": (_spread(0.95, 0.002), 14, "dominates"),
    "below the margin, retrieval better": (_spread(0.95, 0.002), 18, "dominates"),
    "below the margin, retrieval worse": (_spread(0.95, 0.002), 4,
                                          "better perplexity but worse retrieval"),
    "above the margin, retrieval equal": (_spread(1.05, 0.002), 14, "worse"),
    "wide, retrieval equal": (_spread(1.0, 0.08), 14, "not distinguishable"),
    "wide, retrieval better": (_spread(0.99, 0.08), 18, "not distinguishable"),
    "wide, retrieval worse": (_spread(1.0, 0.08), 4, "worse"),
    # the whole interval below 1, inside the band: lower, but not by a margin that matters
    "below 1 inside the band": (_spread(0.992, 0.003), 14, "equivalent"),
    # the whole interval below 1, across 1 − m: not yet shown to be lower by the margin
    "below 1 across the bound": (_spread(0.99, 0.01), 14, "not distinguishable"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verdict_follows_the_margin(case: str) -> None:
    ratios, keys, expected = CASES[case]
    summary = summarize(_validation(ratios, cand_keys=keys))
    verdict, why = summary.verdicts["cand"]
    assert verdict == expected, (why, summary.stats[N]["cand"].interval)
    if expected == "not distinguishable":
        assert "to settle it: about" in why or "no number of documents" in why


def test_the_old_rule_said_dominates_for_a_negligible_difference() -> None:
    # 131.959 against 131.965: a 0.005 % difference whose whole interval is below 1
    ratios = [131.959 / 131.965] * 8
    summary = summarize(_validation([r * (1 + 1e-7 * i) for i, r in enumerate(ratios)]))
    assert summary.stats[N]["cand"].interval[1] < 1.0
    assert summary.verdicts["cand"][0] == "equivalent"
    assert summarize(_validation(ratios), margin=0.0).verdicts["cand"][0] == "dominates"


def test_the_margin_is_in_the_table_and_the_json() -> None:
    summary = summarize(_validation(_spread(1.0, 0.001)), margin=0.02)
    table = format_summary(summary)
    assert "margin m = 2.0% on the ratio" in table and "[0.980, 1.020]" in table
    assert summary.to_dict()["margin"] == 0.02
    assert f"margin m = {DEFAULT_MARGIN:.1%}" in format_summary(summarize(_validation([1.0] * 4)))


@pytest.mark.parametrize("margin", [-0.01, 0.5, "1%", True])
def test_a_bad_margin_is_one_line(margin) -> None:
    with pytest.raises(InvalidArgumentError, match="`margin` must be a number in"):
        summarize(_validation([1.0] * 4), margin=margin)


def test_documents_needed_shrinks_the_interval_to_the_bound() -> None:
    rng = np.random.default_rng(0)
    diffs = list(rng.normal(math.log(0.985), 0.01, 5))  # lower than 1 − m, not yet shown
    n = documents_needed(diffs, 0.01)
    assert n is not None and n > 5
    # with n documents of the same spread, the half-width 1.96·sd/√n clears the bound
    sd, mean = float(np.std(diffs, ddof=1)), float(np.mean(diffs))
    assert 1.96 * sd / math.sqrt(n) <= (math.log(0.99) - mean) + 1e-12
    assert documents_needed([math.log(0.99)] * 3 + [math.log(0.99) + 1e-9], 0.01) is None


def test_a_written_table_is_judged_again_without_a_model(tmp_path, capsys) -> None:
    from longrope_opt.cli import main
    from longrope_opt.evaluation import summary_json

    written = tmp_path / "t.json"
    written.write_text(summary_json(summarize(_validation(_spread(1.002, 0.001)), margin=0.0)))
    assert main(["validate", "--from-json", str(written), "--margin", "1%",
                 "--output", str(tmp_path / "again")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "verdict cand: equivalent" in out and "margin m = 1.0%" in out
    assert (tmp_path / "again.txt").read_text().startswith("16384 tokens")
    assert main(["validate", "--from-json", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit) as bad:  # argparse: one line, exit 2
        main(["validate", "--from-json", str(written), "--margin", "x"])
    assert bad.value.code == 2 and "--margin: must be a fraction" in capsys.readouterr().err


def test_tables_measured_apart_are_judged_as_one(tmp_path, capsys) -> None:
    """Two runs, one fine-tuned model each beside the same rows before: one table, those rows
    once, the formula-tuned row still a formula row; a repeated row with other numbers refused."""
    import dataclasses

    from longrope_opt.cli import main
    from longrope_opt.evaluation import join_tables
    from longrope_opt.evaluation import summary_json

    def with_model(name: str, ratio: float, formula: bool) -> Validation:
        base = _validation(_spread(0.95, 0.002))
        ppl = [ratio * p for p in base.ppl[N]["yarn-cd"]]
        return dataclasses.replace(
            base, rows=[*base.rows, name], classic=[*base.classic, *([name] if formula else [])],
            ppl={N: {**base.ppl[N], name: ppl}},
            passkey={N: {**base.passkey[N], name: [True] * KEYS}},
            paths={N: {**base.paths[N], name: ["f32"]}},
        )  # fmt: skip

    a = with_model("ft-searched", 0.90, formula=False)
    b = with_model("ft-yarn-cd", 0.93, formula=True)
    joined = join_tables([a, b])
    assert joined.rows == ["yarn-cd", "cand", "ft-searched", "ft-yarn-cd"]
    assert joined.classic == ["yarn-cd", "ft-yarn-cd"]
    assert joined.ppl[N]["ft-yarn-cd"] == b.ppl[N]["ft-yarn-cd"]
    files = []
    for name, part in (("a", a), ("b", b)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(summary_json(summarize(part)))
    assert main(["validate", "--from-json", str(files[0]), "--from-json", str(files[1])]) == 0
    out = capsys.readouterr().out
    # the reference is the best formula row, the fine-tuned one: the searched row is judged on it
    assert "reference: ft-yarn-cd" in out and "verdict ft-searched:" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("yarn-cd ", "cand "))]
    assert rows == ["yarn-cd", "cand"]  # the rows both tables hold: once
    other = dataclasses.replace(b, ppl={N: {**b.ppl[N], "cand": [1.0] * len(b.documents)}})
    with pytest.raises(InvalidArgumentError, match="row 'cand' is in two tables with other numbers"):
        join_tables([a, other])
    moved = dataclasses.replace(b, documents=["x"] * len(b.documents))
    with pytest.raises(InvalidArgumentError, match="must share their documents"):
        join_tables([a, moved])
