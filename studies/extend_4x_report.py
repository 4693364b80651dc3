"""The 4x table's statistics and text: paired perplexity differences with a bootstrap interval,
passkey accuracy with a Wilson interval, and the exact sign test on paired passkey prompts.

Kept apart from studies/extend_4x_smollm2.py (which runs the stages) so bench/heldout_prose.py
reports its rows with the same statistics.
"""

from __future__ import annotations

import math

import numpy as np


def bootstrap(
    diffs: np.ndarray, rng: np.random.Generator, resamples: int = 4000
) -> tuple[float, float]:
    """95 % percentile interval of the mean of `diffs` (resampled with replacement)."""
    means = [rng.choice(diffs, diffs.size).mean() for _ in range(resamples)]
    return tuple(np.percentile(means, [2.5, 97.5]))


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of a proportion k/n."""
    z = 1.96
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return centre - half, centre + half


def sign_test(b: int, c: int) -> float:
    """Exact two-sided sign test (McNemar) p-value for b vs c discordant pairs."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def report(raw: dict, L: int, doc_ids: list[str]) -> str:
    """The table: per method, perplexity, paired differences, passkey accuracy (k/n, interval),
    then passkey paired with the best classic method on the same prompts (sign test)."""
    rows = {name: row for name, row in raw.items() if "ppl" in row}
    classic = [m for m in ("pi", "ntk", "yarn", "yarn-cd", "ntk-cd") if m in rows]
    if not classic:  # e.g. only `none` measured so far: nothing to pair the rows with
        return f"{L} tokens: no classic row measured yet (pi, ntk, yarn, yarn-cd or ntk-cd)"
    best = min(classic, key=lambda m: np.mean(np.log(rows[m]["ppl"])))
    lines = [f"{L} tokens, held-out {doc_ids}; best classic method: {best}"]
    lines.append(f"{'method':<14}{'ppl':>9}{'ratio':>8}{'Δ log ppl':>11}{'95 % CI':>20}"
                 f"{'per window':>28}" + "".join(f"{'passkey ' + str(n):>24}" for n in (L // 2, L)))  # fmt: skip
    ref = np.log(rows[best]["ppl"])
    for name, row in rows.items():
        logs = np.log(row["ppl"])
        diff = logs - ref
        # a fresh generator per row: a row's interval does not depend on which rows precede it
        lo, hi = bootstrap(diff, np.random.default_rng(0)) if name != best else (0.0, 0.0)
        # one window (8x on this corpus): resampling it gives a point, not an interval
        ci = f"[{lo:+.4f}, {hi:+.4f}]" if diff.size > 1 or name == best else f"{'—':^18}"
        line = (f"{name:<14}{math.exp(logs.mean()):9.3f}{math.exp(diff.mean()):8.3f}"
                f"{diff.mean():+11.4f}   {ci}{' '.join(f'{d:+.3f}' for d in diff):>28}")  # fmt: skip
        for n in (L // 2, L):
            keys = row.get(f"passkey{n}", [])
            if keys:
                a, b = wilson(sum(keys), len(keys))
                line += f"{sum(keys):>6}/{len(keys):<3}[{a:4.0%}, {b:4.0%}]".rjust(24)
            else:
                line += f"{'not run':>24}"
        lines.append(line)
    lines.append("ppl: geometric mean over the windows; ratio = exp(mean Δ log ppl) vs the best "
                 "classic method; CI: bootstrap over windows (— with one window); passkey: "
                 "correct/keys [Wilson 95 %].")  # fmt: skip
    # `auto` is another compute path on another CPU: say so when the rows' perplexities mix them
    by_path: dict[str, list[str]] = {}
    for name, row in rows.items():
        by_path.setdefault(row.get("compute", {}).get("ppl", "not recorded"), []).append(name)
    if len(by_path) > 1:
        lines.append("ppl on more than one compute path: "
                     + "; ".join(f"{p}: {', '.join(n)}" for p, n in by_path.items()))  # fmt: skip
    lines.append(f"\npasskey paired with {best} on the same prompts: +b only the method retrieves, "
                 "-c only the best classic does; exact sign test p")  # fmt: skip
    for name, row in rows.items():
        cells = []
        for n in (L // 2, L):
            mine, theirs = row.get(f"passkey{n}", []), rows[best].get(f"passkey{n}", [])
            k = min(len(mine), len(theirs))
            if name == best or not k:
                cells.append(f"{'—':>26}")
                continue
            b = sum(m and not t for m, t in zip(mine[:k], theirs[:k]))
            c = sum(t and not m for m, t in zip(mine[:k], theirs[:k]))
            cells.append(f"{k:>3} keys +{b:<2} -{c:<2} p {sign_test(b, c):5.3f}".rjust(26))
        lines.append(f"{name:<14}" + "".join(cells))
    return "\n".join(lines)

