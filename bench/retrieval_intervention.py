"""Which dimensions carry the 32k passkey loss? Swap one band of λ between two table rows.

The 4x table (studies/extend_4x_smollm2.py) found prompts that YaRN-cd retrieves at 32k and the
plain LongRoPE search does not. The two differ in several places at once: λ on the
high-frequency dimensions (YaRN-cd > 1, the plain search = 1), λ on the middle band, n̂. This
bench takes a *base* row, replaces λ on one band of dimensions with a *donor* row's values, and
keeps everything else (other λ, n̂, t) from the base. It then runs passkey retrieval on
the prompts where the two rows disagree (the base retrieves, the donor does not). Those prompts
were drawn before anyone looked at them, by the table's seed. If the hybrid loses them, the
donor's band is enough to cause the loss; if it keeps them, the band alone is not.

    python bench/retrieval_intervention.py                       # the three default hybrids
    python bench/retrieval_intervention.py --hybrid 'high=yarn-cd:plain-search:0-10' --prompts 2,3
    # does YaRN-cd's ramp below dim 24 rescue the new search? prompts it misses, and perplexity
    python bench/retrieval_intervention.py --hybrid 'new-floor=new-search:yarn-cd:0-24' \
        --prompts 1,3,5,8,10,13,15,16 --perplexity --json bench/results/retrieval-rescue.json

Each prompt costs one forward at the target (≈ 1 min on an AMX CPU, ≈ 5 min without). Results go
to `--json` after every prompt, so an interrupted run resumes where it stopped. The table goes to
the same path with `.txt`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import NoReturn

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_HYBRIDS = (
    # YaRN-cd with the plain search's λ = 1 on the ten highest frequencies: is that the loss?
    "ycd-high-plain=yarn-cd:plain-search:0-10",
    # YaRN-cd with the plain search's (lower) λ on the middle band, 10..19: or is it this?
    "ycd-mid-plain=yarn-cd:plain-search:10-20",
    # Both bands at once: all the plain search's λ that differ, with YaRN-cd's n̂ and t.
    "ycd-both-plain=yarn-cd:plain-search:0-20",
)


def parse_hybrid(text: str) -> tuple[str, str, str, int, int]:
    """``name=base:donor:a-b`` → (name, base, donor, a, b); dims a..b-1 come from the donor."""
    try:
        name, rest = text.split("=")
        base, donor, band = rest.split(":")
        a, b = (int(x) for x in band.split("-"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--hybrid must look like name=base:donor:a-b (e.g. high=yarn-cd:plain-search:0-10), "
            f"got {text!r}"
        ) from exc
    if not 0 <= a < b:
        raise argparse.ArgumentTypeError(f"--hybrid band must satisfy 0 <= a < b, got {a}-{b}")
    return name, base, donor, a, b


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "extend-4x"),
                   help="the 4x table's results prefix (<out>.db, <out>.json)")  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--target-length", type=int, default=32768)
    p.add_argument("--hybrid", type=parse_hybrid, action="append",
                   help="name=base:donor:a-b, repeatable (default: dims 0-9, 10-19 and 0-19 "
                        "of plain-search in yarn-cd)")  # fmt: skip
    p.add_argument("--prompts", default="",
                   help="comma-separated prompt indices (default: where base retrieves and the "
                        "donor does not, among prompts the table ran for both)")  # fmt: skip
    p.add_argument("--perplexity", action="store_true",
                   help="also each hybrid's perplexity on the table's held-out windows, paired "
                        "with its base and donor (one forward per window)")  # fmt: skip
    p.add_argument("--corpus", default="builtin", help="the table's corpus (for --perplexity)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "retrieval-intervention.json"))
    args = p.parse_args()
    args.hybrid = args.hybrid or [parse_hybrid(h) for h in DEFAULT_HYBRIDS]
    try:
        args.prompts = [int(i) for i in args.prompts.split(",") if i.strip()]
    except ValueError:
        p.error(f"--prompts must be comma-separated integers, got {args.prompts!r}")
    if any(i < 0 for i in args.prompts):
        p.error(f"--prompts must be >= 0, got {args.prompts}")
    return args


def usage_error(message: str) -> NoReturn:
    """One line on stderr, exit code 2 (as argparse does for bad arguments)."""
    print(f"retrieval_intervention.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def hybrid_scaling(base, donor, a: int, b: int, name: str):
    """`base` with λ[a:b] taken from `donor`; n̂ and t stay the base's."""
    from longrope_opt import RopeScaling

    factors = np.array(base.factors)
    if b > factors.size:
        usage_error(f"--hybrid {name}: the band must end at <= {factors.size} (the factor "
                    f"count), got {b}")
    factors[a:b] = np.asarray(donor.factors)[a:b]
    return RopeScaling(factors, base.n_hat, base.attention_scale, method=name)


def marks(keys: list[bool], indices) -> str:
    """1 retrieved, . missed, ? not run — one character per index."""
    return "".join("?" if i >= len(keys) else "1" if keys[i] else "." for i in indices)


def held_windows(x4, raw: dict, corpus: str, tok, L: int):
    """The table's held-out windows, drawn by the 4x script's own `held_out`; exit 2 if the
    table's rows were measured on others."""
    docs = next((row["docs"] for row in raw.values() if "docs" in row), None)
    if docs is None:
        usage_error("--perplexity: the table has no perplexity rows yet")
    held = x4.held_out(corpus, tok, L, len(docs))
    if held.doc_ids != docs:
        usage_error(f"--perplexity: --corpus {corpus!r} gives windows {held.doc_ids}, the table "
                    f"used {docs}")  # fmt: skip
    return held


def paired_ppl(name: str, ppl: list[float], raw: dict, rows: tuple[str, ...]) -> str:
    """Geometric-mean perplexity and the per-window Δ log ppl against each of `rows`."""
    logs = np.log(ppl)
    parts = [f"  {name:<14} ppl {np.exp(logs.mean()):.3f}"]
    for row in rows:
        diff = logs - np.log(raw[row]["ppl"])
        parts.append(f"vs {row} ×{np.exp(diff.mean()):.3f} (windows "
                     f"{' '.join(f'{d:+.3f}' for d in diff)})")  # fmt: skip
    return "; ".join(parts)


def main() -> None:
    args = parse()

    from longrope_opt.files import write_text_atomic
    from longrope_opt.objectives import evaluate_passkey
    from longrope_opt.objectives import evaluate_perplexity

    spec = importlib.util.spec_from_file_location("x4", ROOT / "studies" / "extend_4x_smollm2.py")
    x4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(x4)

    L = args.target_length
    raw, model, tok, methods = x4.load_table(args.out, args.model, args.dtype, L, "--target-length")
    out = Path(args.json)
    done = json.loads(out.read_text()) if out.exists() else {}
    held = held_windows(x4, raw, args.corpus, tok, L) if args.perplexity else None
    lines = [f"passkey at {L}: hybrids = base with one band of λ from the donor (n̂, t: base's)"]
    for name, base, donor, a, b in args.hybrid:
        for row in (base, donor):
            if methods.get(row) is None:
                usage_error(f"--hybrid {name}: no scaled row {row!r}; choose from "
                            f"{[m for m, s in methods.items() if s is not None]}")  # fmt: skip
        scaling = hybrid_scaling(methods[base], methods[donor], a, b, name)
        mine, theirs = (raw.get(r, {}).get(f"passkey{L}", []) for r in (base, donor))
        prompts = args.prompts or [
            i for i, (x, y) in enumerate(zip(mine, theirs)) if x and not y
        ]  # the base retrieves, the donor does not
        entry = done.setdefault(name, {"factors": scaling.factors.tolist(), "results": {}})
        if entry["factors"] != scaling.factors.tolist():  # other rows since: start again
            entry.update(factors=scaling.factors.tolist(), results={})
        entry.update(base=base, donor=donor, band=[a, b], n_hat=scaling.n_hat,
                     t=scaling.attention_scale)  # fmt: skip
        if held is not None and entry.get("ppl_docs") != held.doc_ids:
            ppl = evaluate_perplexity(model, held, scaling, progress=True).sample_ppl
            entry.update(ppl=[float(x) for x in ppl], ppl_docs=held.doc_ids)
            write_text_atomic(out, json.dumps(done, indent=1))
        for i in prompts:
            if str(i) in entry["results"]:
                continue
            r = evaluate_passkey(model, tok, scaling, L, n_trials=i + 1, start=i, progress=True)
            entry["results"][str(i)] = {"correct": bool(r.correct[0]), "key_nll": r.nll[0]}
            write_text_atomic(out, json.dumps(done, indent=1))
            print(f"  {name} prompt {i}: {'retrieved' if r.correct[0] else 'missed'}", flush=True)
        got = [entry["results"][str(i)]["correct"] for i in prompts]
        known = [(i, c) for i, c in zip(prompts, got) if i < len(mine)]
        lost = sum(mine[i] and not c for i, c in known)  # the base retrieves, the hybrid not
        won = sum(c and not mine[i] for i, c in known)
        lines.append(
            f"{name:<16} {base} with λ[{a}:{b}] of {donor}: prompts {prompts}\n"
            f"  {base:<14} {marks(mine, prompts)}\n  {donor:<14} {marks(theirs, prompts)}\n"
            f"  {name:<14} {marks(got, range(len(got)))}  ({sum(got)}/{len(got)} retrieved; "
            f"vs {base}: -{lost} +{won}, sign test p = {x4.stats.sign_test(won, lost):.3f})"
        )
        if "ppl" in entry:  # measured now or by an earlier --perplexity run
            lines.append(paired_ppl(name, entry["ppl"], raw, (base, donor)))
    table = "\n".join(lines)
    print(table)
    out.with_suffix(".txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
