"""A validation's statistics and verdicts, as text, CSV and JSON.

Each length's reference is its best classic row (lowest mean log perplexity over the documents).
Every other row is paired with it: perplexity document by document (ratio = exp of the mean
Δ log ppl, 95 % paired bootstrap interval over documents), passkeys prompt by prompt (exact sign
test on the prompts only one of the two retrieves). A candidate's verdict, with a practical
margin m on the ratio (`DEFAULT_MARGIN`, the legend prints it):

* **dominates**: lower perplexity by more than the margin at every length (the whole interval
  below 1 − m) and retrieval not worse at any;
* **better perplexity but worse retrieval**: lower by the margin, but a retrieval loss somewhere;
* **worse**: higher perplexity by more than the margin at some length (interval above 1 + m), or
  a retrieval loss without a perplexity gain;
* **equivalent**: the whole interval inside [1 − m, 1 + m] at every length and retrieval not
  worse — two one-sided tests at 2.5 % each: the formula is as good, and simpler to ship;
* **not distinguishable**: anything else — too few documents to tell; the reason says about how
  many would (`documents_needed`).

With no passkeys measured a verdict speaks of perplexity only and says so (``perplexity only:
lower``, never "dominates").

Why 1 %: a gain smaller than what moves between kinds of text does not carry to the text a
model will read. Measured: the 2× winner's ratio to YaRN-cd is 0.987 on its own documents and
0.997 on held-out books (a 1.0 % shift), the first 4× search's gain 2.4 % in-sample and none held
out; one document's Δ log ppl spreads ≈ 0.7 % around the mean (the 2× table). The compute path
moves a ratio by 0.01 % only (`bench/results/margin.txt`): the margin is about the text, not the
arithmetic. The reference is called the best classic method only when every
classic row that can be best past the trained length was measured (`CONTENDERS`); otherwise
the table says "best of the rows measured". A study candidate's ratio on the study's own
documents (`Row.in_sample`) is printed beside its held-out ratio: the gap is the overfit.

A retrieval loss is more misses than wins against the reference with sign-test p ≤ 0.2, not
0.05: 20 keys cannot show a real loss at 0.05 unless it is large, and shipping a model that
reads worse costs more than rejecting one that does not.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation._stats import paired_bootstrap
from longrope_opt.evaluation._stats import sign_test
from longrope_opt.evaluation._stats import wilson
from longrope_opt.evaluation._validate import Validation


VERDICTS = ("dominates", "better perplexity but worse retrieval", "equivalent",
            "not distinguishable", "worse", "perplexity only: lower",
            "perplexity only: equivalent", "perplexity only: not distinguishable",
            "perplexity only: higher")  # fmt: skip
#: The practical margin on the perplexity ratio: 1 % (why: the module docstring).
DEFAULT_MARGIN = 0.01
#: The classic rows that can be the best past the trained length (none and PI never are, on
#: every table here): a reference chosen without all of them is not "the best classic".
CONTENDERS = ("yarn", "yarn-cd", "ntk", "ntk-cd")
#: A retrieval loss is significant at this sign-test p (see the module docstring).
RETRIEVAL_ALPHA = 0.2


@dataclasses.dataclass(frozen=True)
class RowStats:
    """One row at one length, against the length's reference row.

    Attributes:
        ppl: Geometric mean perplexity over the documents.
        ratio: exp(mean Δ log ppl) against the reference.
        interval: 95 % bootstrap interval of the ratio (None for the reference itself).
        diffs: Δ log ppl per document.
        retrieved: Prompts retrieved, of `keys`.
        keys: Passkey prompts (0: none run).
        wilson: 95 % Wilson interval of the retrieval rate.
        wins: Prompts only this row retrieves (b).
        losses: Prompts only the reference retrieves (c).
        p: Exact sign-test p of wins vs losses.
        paths: Compute paths its numbers came from.
    """

    ppl: float
    ratio: float
    interval: tuple[float, float] | None
    diffs: list[float]
    retrieved: int
    keys: int
    wilson: tuple[float, float] | None
    wins: int
    losses: int
    p: float
    paths: list[str]


@dataclasses.dataclass(frozen=True)
class Summary:
    """Statistics of a `Validation`: ``stats[length][row]``, the reference per length, and one
    verdict (with its reason) per candidate."""

    validation: Validation
    reference: dict[int, str]
    stats: dict[int, dict[str, RowStats]]
    verdicts: dict[str, tuple[str, str]]
    margin: float = DEFAULT_MARGIN

    @property
    def reference_kind(self) -> str:
        """``"best classic"`` when every contender was measured, else ``"best of the rows
        measured"``."""
        complete = all(c in self.validation.classic for c in CONTENDERS)
        return "best classic" if complete else "best of the rows measured"

    def in_sample(self, row: str, length: int) -> tuple[str, float] | None:
        """``(seed, ratio)``: `row`'s in-sample ratio against the study seed that is this
        length's reference (else the study's best seed), or None (not a study candidate)."""
        ratios = self.validation.in_sample.get(row)
        if not ratios:
            return None
        ref = self.reference[length]
        name = ref if ref in ratios else max(ratios, key=lambda m: (ratios[m], m))
        return name, ratios[name]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the raw numbers and the statistics."""
        return {
            "validation": self.validation.to_dict(),
            "reference": {str(n): r for n, r in self.reference.items()},
            "stats": {str(n): {r: dataclasses.asdict(s) for r, s in rows.items()}
                      for n, rows in self.stats.items()},  # fmt: skip
            "verdicts": {r: {"verdict": v, "why": why} for r, (v, why) in self.verdicts.items()},
            "reference_kind": self.reference_kind,
            "margin": self.margin,
        }


def summarize(
    validation: Validation, *, margin: float = DEFAULT_MARGIN, resamples: int = 4000, seed: int = 0
) -> Summary:
    """Pair every row with the best classic row at each length and judge the candidates.

    Args:
        validation: The measurements.
        margin: The practical margin m on the perplexity ratio, in [0, 0.5): a ratio within
            [1 − m, 1 + m] is no reason to prefer either row.
        resamples: Bootstrap resamples.
        seed: Bootstrap seed.

    Raises:
        InvalidArgumentError: `margin` out of range.
    """
    check_margin(margin)
    v = validation
    reference: dict[int, str] = {}
    stats: dict[int, dict[str, RowStats]] = {}
    for n in v.lengths:
        logs = {r: np.log(v.ppl[n][r]) for r in v.rows}
        classic = v.classic or v.rows
        best = min(classic, key=lambda r: (float(logs[r].mean()), classic.index(r)))
        reference[n] = best
        ref_keys = v.passkey[n][best]
        stats[n] = {}
        for r in v.rows:
            diffs = logs[r] - logs[best]
            interval = None
            if r != best:
                lo, hi = paired_bootstrap(diffs, seed=seed, resamples=resamples)
                interval = (math.exp(lo), math.exp(hi))
            mine = v.passkey[n][r]
            wins = sum(m and not t for m, t in zip(mine, ref_keys))
            losses = sum(t and not m for m, t in zip(mine, ref_keys))
            stats[n][r] = RowStats(
                ppl=float(math.exp(logs[r].mean())), ratio=float(math.exp(diffs.mean())),
                interval=interval, diffs=[float(d) for d in diffs], retrieved=sum(mine),
                keys=len(mine), wilson=wilson(sum(mine), len(mine)) if mine else None,
                wins=wins, losses=losses, p=sign_test(wins, losses), paths=v.paths[n][r],
            )  # fmt: skip
    verdicts = {r: _verdict(r, v.lengths, stats, reference, margin)
                for r in v.rows if r not in v.classic}  # fmt: skip
    return Summary(v, reference, stats, verdicts, margin)


def check_margin(margin: Any) -> float:
    """`margin` as a float in [0, 0.5), or a one-line error naming it."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 0.5:
        raise InvalidArgumentError(
            f"`margin` must be a number in [0, 0.5) (a fraction of the perplexity ratio: 0.01 "
            f"is 1 %), got {margin!r}."
        )
    return float(margin)


def documents_needed(diffs: list[float], margin: float, *, z: float = 1.96) -> int | None:
    """About how many documents would make the 95 % interval of the mean Δ log ppl clear the
    nearest decisive bound (1 − m, 1 + m, or both sides of the equivalence band), from the
    spread of `diffs` (normal approximation); None when the mean sits on a bound (no number
    of documents settles it) or there is no spread to go by."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size < 2 or not np.isfinite(d).all():
        return None
    sd, mean = float(d.std(ddof=1)), float(d.mean())
    low, high = math.log(1.0 - margin), math.log(1.0 + margin)
    if mean < low:
        gap = low - mean  # to show "lower by the margin"
    elif mean > high:
        gap = mean - high  # to show "higher by the margin"
    else:
        gap = min(high - mean, mean - low)  # to show "inside the band"
    if sd == 0.0 or gap <= 1e-6:
        return None
    return max(d.size + 1, math.ceil((z * sd / gap) ** 2))


def _verdict(
    row: str,
    lengths: list[int],
    stats: dict[int, dict[str, RowStats]],
    reference: dict[int, str],
    margin: float,
) -> tuple[str, str]:
    better, worse, equivalent, lost, parts = True, False, True, False, []
    measured = any(stats[n][row].keys for n in lengths)
    needed: list[int | None] = []
    for n in lengths:
        s, ref = stats[n][row], reference[n]
        if s.interval is None:  # the candidate is the reference (a classic row can not be)
            better = equivalent = False
            parts.append(f"{n}: is the reference")
            continue
        lo, hi = s.interval
        better &= hi < 1.0 - margin
        worse |= lo > 1.0 + margin
        equivalent &= lo >= 1.0 - margin and hi <= 1.0 + margin
        needed.append(documents_needed(s.diffs, margin))
        part = f"{n}: ppl {s.ratio:.3f}x {ref} [{lo:.3f}, {hi:.3f}]"
        if s.keys:
            r = stats[n][ref]
            loss = s.losses > s.wins and s.p <= RETRIEVAL_ALPHA
            lost |= loss
            part += (f", passkey {s.retrieved}/{s.keys} vs {r.retrieved}/{r.keys} "
                     f"(+{s.wins} -{s.losses}, p {s.p:.3f})")  # fmt: skip
        parts.append(part)
    if not measured:  # no passkeys: nothing is known of retrieval
        verdict = ("perplexity only: lower" if better else "perplexity only: higher" if worse
                   else "perplexity only: equivalent" if equivalent
                   else "perplexity only: not distinguishable")  # fmt: skip
    elif better and not lost:
        verdict = "dominates"
    elif better:
        verdict = "better perplexity but worse retrieval"
    elif worse or lost:
        verdict = "worse"
    elif equivalent:
        verdict = "equivalent"
    else:
        verdict = "not distinguishable"
    if verdict.endswith("not distinguishable"):
        known = [k for k in needed if k is not None]
        parts.append(f"to settle it: about {max(known)} documents" if known
                     else "no number of documents settles it: the ratio sits at the margin")  # fmt: skip
    return verdict, "; ".join(parts)


def format_summary(summary: Summary) -> str:
    """The tables (one per length) and the verdicts, as printed by `longrope-opt validate`."""
    v, out = summary.validation, []
    width = max(14, *(len(r) + 2 for r in v.rows))
    for n in v.lengths:
        ref = summary.reference[n]
        out.append(f"{n} tokens: {len(v.documents)} documents {v.documents}; "
                   f"{v.keys} passkeys (seed {v.passkey_seed}, {v.passkey_form} form); reference: {ref} "
                   f"({summary.reference_kind}{_measured(summary)})")  # fmt: skip
        out.append(f"{'row':<{width}}{'ppl':>9}{'ratio':>8}{'95 % CI':>18}  "
                   f"{'Δ log ppl per document':<{8 * len(v.documents)}}"
                   f"{'passkey':>9}{'Wilson 95 %':>14}{'vs ' + ref:>22}")  # fmt: skip
        for r in v.rows:
            s = summary.stats[n][r]
            ci = f"[{s.interval[0]:.3f}, {s.interval[1]:.3f}]" if s.interval else "—"
            docs = "".join(f"{d:+8.3f}" for d in s.diffs)
            line = f"{r:<{width}}{s.ppl:9.3f}{s.ratio:8.3f}{ci:>18}  {docs}"
            if s.keys:
                w = s.wilson or (0.0, 0.0)
                pair = "—" if r == ref else f"+{s.wins} -{s.losses} p {s.p:.3f}"
                line += f"{s.retrieved:>6}/{s.keys:<3}[{w[0]:4.0%}, {w[1]:4.0%}]{pair:>22}"
            out.append(line)
        for r in v.rows:
            seen = summary.in_sample(r, n)
            if seen is not None:
                seed, ratio = seen
                out.append(f"overfit {r}: in-sample {ratio:.3f}x {seed} (the study's own "
                           f"documents) → held-out {summary.stats[n][r].ratio:.3f}x {ref}")  # fmt: skip
        mixed = {r: p for r, p in v.paths[n].items() if p != [v.path]}
        if mixed:
            out.append(f"compute paths: this run {v.path}; from the store: "
                       + "; ".join(f"{r} {'+'.join(p)}" for r, p in mixed.items()))  # fmt: skip
        out.append("")
    out.append(f"ppl: geometric mean over documents; ratio: exp(mean Δ log ppl) vs the reference, "
               f"95 % paired bootstrap over documents; passkey: retrieved/keys, paired with the "
               f"reference on the same prompts (exact sign test; a loss at p <= {RETRIEVAL_ALPHA}).")  # fmt: skip
    m = summary.margin
    out.append(f"margin m = {m:.1%} on the ratio: dominates / better need the whole interval below "
               f"{1 - m:.3f}, worse above {1 + m:.3f}; equivalent: inside [{1 - m:.3f}, "
               f"{1 + m:.3f}] with retrieval not worse (two one-sided tests at 2.5 %).")  # fmt: skip
    for r, (verdict, why) in summary.verdicts.items():
        source = v.sources.get(r, "")
        out.append(f"verdict {r}: {verdict} — {why}" + (f"  [{source}]" if source else ""))
    return "\n".join(out)


def _measured(summary: Summary) -> str:
    if summary.reference_kind == "best classic":
        return ""
    return ": " + ", ".join(summary.validation.classic or ["none"])


def summary_csv(summary: Summary) -> str:
    """One line per (length, row)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["length", "row", "classic", "reference", "ppl", "ratio", "ci_low", "ci_high",
                "retrieved", "keys", "wilson_low", "wilson_high", "wins", "losses", "p",
                "paths", "verdict", "in_sample_seed", "in_sample_ratio"])  # fmt: skip
    v = summary.validation
    for n in v.lengths:
        for r in v.rows:
            s = summary.stats[n][r]
            lo, hi = s.interval or ("", "")
            wl, wh = s.wilson or ("", "")
            seed, ratio = summary.in_sample(r, n) or ("", "")
            w.writerow([n, r, r in v.classic, summary.reference[n], f"{s.ppl:.6g}",
                        f"{s.ratio:.6g}", lo, hi, s.retrieved, s.keys, wl, wh, s.wins, s.losses,
                        f"{s.p:.6g}", "+".join(s.paths),
                        summary.verdicts.get(r, ("",))[0], seed,
                        f"{ratio:.6g}" if ratio != "" else ""])  # fmt: skip
    return buf.getvalue()


def summary_json(summary: Summary) -> str:
    """Everything (raw numbers, statistics, verdicts) as JSON."""
    return json.dumps(summary.to_dict(), indent=1) + "\n"
