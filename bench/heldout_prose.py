"""Does the 4x table's perplexity hold on other text? Every row again, on documents of a corpus.

The 4x table (studies/extend_4x_smollm2.py) measures perplexity on three windows of one held-out
document, CPython's reference manual: the built-in corpus has only three documents of 32k tokens
and the searches use the other two. This bench takes the table's rows as they are (the classic
methods, and each search's re-ranked winner read from <out>.db) and measures them on the first
`--length` tokens of each of `--docs` documents of another corpus, one window per document, so
the interval is over documents. Each row is paired with `--reference` (the table's best classic
method) on the same documents: Δ log ppl per document, its mean, a bootstrap 95 % interval.

    # long prose no search here saw, offline: the Rust toolchain's books (see bench/html_corpus.py)
    python bench/html_corpus.py ~/.rustup/toolchains/*/share/doc/rust/html/{book,reference,nomicon,cargo,rustc,embedded-book,edition-guide}/print.html --out /tmp/prose
    python bench/heldout_prose.py --corpus /tmp/prose --docs 4 --methods yarn-cd,new-search,plain-search
    python bench/heldout_prose.py --corpus /tmp/prose --docs 4     # every row of the table

Each (row, document) costs one forward at `--length` (≈ 1 min at 32k on an AMX CPU, ≈ 5 min
without). Results go to `--json` after each one, so an interrupted run resumes where it stopped,
and a larger `--docs` only measures the new documents; a row whose factors changed since (a new
search winner), or a document whose tokens did, is measured again. A `--json` holds one
setting (model, compute path, length): another one is refused, not overwritten. The table goes
to the same path with `.txt`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import NoReturn

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--corpus", required=True, help="a .txt file or folder, or a datasets name")
    p.add_argument("--docs", type=int, default=4, help="documents, one window each (>= 2)")
    p.add_argument("--seed", type=int, default=0, help="which documents of the corpus")
    p.add_argument("--methods", default="", help="comma-separated rows (default: every row)")
    p.add_argument("--reference", default="yarn-cd", help="the row the others are paired with")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "extend-4x"),
                   help="the 4x table's results prefix (<out>.db, <out>.json)")  # fmt: skip
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--length", type=int, default=32768, help="tokens per window (the target)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "extend-4x-prose.json"))
    args = p.parse_args()
    if args.docs < 2:
        p.error(f"--docs must be >= 2 (an interval over documents needs two), got {args.docs}")
    if args.length < 2:
        p.error(f"--length must be >= 2, got {args.length}")
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    return args


def usage_error(message: str) -> NoReturn:
    """One line on stderr, exit code 2 (as argparse does for bad arguments)."""
    print(f"heldout_prose.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def identity(scaling) -> dict:
    """What makes a row the same row on a rerun (JSON-comparable)."""
    if scaling is None:
        return {"factors": None}
    return {"factors": [float(x) for x in scaling.factors], "n_hat": int(scaling.n_hat),
            "t": float(scaling.attention_scale)}  # fmt: skip


def window_hash(sample) -> str:
    """Fingerprint of one window's tokens: a result is kept only for the window it was made on."""
    return hashlib.sha256(sample.numpy().astype("int64").tobytes()).hexdigest()[:16]


def report(rows: dict, reference: str, docs: list[str], table: dict, x4) -> str:
    """Per row: geometric-mean ppl; Δ log ppl vs `reference` per document, mean, bootstrap CI;
    and the same ratio in the 4x table, for comparison."""
    ref = rows[reference]["ppl"]
    lines = [
        f"{len(docs)} documents × 1 window: {[Path(d).name for d in docs]}",
        f"{'method':<14}{'ppl':>9}{'ratio':>8}{'Δ log ppl':>11}{'95 % CI':>21}  per document"
        f"{'':>{max(0, 8 * len(docs) - 12)}}{'4x table':>10}",
    ]
    for name, row in rows.items():
        shared = [d for d in docs if d in row["ppl"] and d in ref]
        if not shared:
            lines.append(f"{name:<14}{'not run':>9}")
            continue
        logs = np.log([row["ppl"][d] for d in shared])
        diff = logs - np.log([ref[d] for d in shared])
        if name == reference:
            ci = f"[{0:+.4f}, {0:+.4f}]"
        elif len(shared) > 1:
            # a fresh generator per row: its interval does not depend on the rows before it
            ci = "[{:+.4f}, {:+.4f}]".format(*x4.stats.bootstrap(diff, np.random.default_rng(0)))
        else:  # one document: no interval over documents
            ci = f"{'—':^18}"
        cells = " ".join(f"{diff[shared.index(d)]:+7.3f}" if d in shared else f"{'—':>7}"
                         for d in docs)  # fmt: skip
        theirs = table.get(name, {}).get("ppl")
        mine = table.get(reference, {}).get("ppl")
        was = (f"{math.exp(np.mean(np.log(theirs)) - np.mean(np.log(mine))):10.3f}"
               if theirs and mine else f"{'—':>10}")  # fmt: skip
        count = "" if len(shared) == len(docs) else f"  ({len(shared)}/{len(docs)} documents)"
        lines.append(f"{name:<14}{math.exp(logs.mean()):9.3f}{math.exp(diff.mean()):8.3f}"
                     f"{diff.mean():+11.4f}   {ci}  {cells}{was}{count}")  # fmt: skip
    lines.append(f"ppl: geometric mean over the documents; ratio = exp(mean Δ log ppl) vs "
                 f"{reference} on the same documents; CI: bootstrap over documents; 4x table: the "
                 f"same ratio on the table's held-out windows.")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    args = parse()

    from longrope_opt.data import check_source
    from longrope_opt.data import load_samples
    from longrope_opt.errors import LongRopeOptError
    from longrope_opt.files import write_text_atomic
    from longrope_opt.objectives import evaluate_perplexity

    try:
        check_source(args.corpus)
    except LongRopeOptError as exc:
        usage_error(str(exc))
    spec = importlib.util.spec_from_file_location("x4", ROOT / "studies" / "extend_4x_smollm2.py")
    x4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(x4)
    table, model, tok, methods = x4.load_table(
        args.out, args.model, args.dtype, args.length, "--length"
    )
    wanted = args.methods or list(methods)
    unknown = [m for m in {*wanted, args.reference} if m not in methods]
    if unknown:
        usage_error(f"--methods/--reference: no row {sorted(unknown)[0]!r}; choose from "
                    f"{list(methods)}")  # fmt: skip
    wanted = [args.reference, *(m for m in wanted if m != args.reference)]
    # "auto" is the fastest compute path of this CPU (bf16 on one, bf16 + fp32 attention on
    # another): record the one that ran, so numbers from two paths are never mixed.
    path = getattr(model, "longrope_opt_compute", {}).get("path", args.dtype)
    setting = {"model": args.model, "dtype": path, "length": args.length}
    out = Path(args.json)
    done = json.loads(out.read_text()) if out.exists() else {}
    if done and done.get("setting") != setting:  # other numbers altogether: keep them
        usage_error(f"--json: {out} holds results for {done.get('setting')}, not this run's "
                    f"{setting}; pass another --json")  # fmt: skip
    done = done or {"setting": setting, "windows": {}, "rows": {}}
    try:
        samples = load_samples(args.corpus, tok, args.length, args.docs, seed=args.seed)
    except LongRopeOptError as exc:
        usage_error(str(exc))
    docs = samples.doc_ids
    for doc, sample in zip(docs, samples):  # a document whose text changed is measured again
        tokens = window_hash(sample)
        if done["windows"].setdefault(doc, tokens) != tokens:
            done["windows"][doc] = tokens
            for row in done["rows"].values():
                row["ppl"].pop(doc, None)
    done["docs"] = docs  # more --docs extends fewer: the first ones are the same
    for name in wanted:
        row = done["rows"].setdefault(name, {"ppl": {}})
        if row.get("identity") != identity(methods[name]):  # new, or another winner since
            row.update(identity=identity(methods[name]), ppl={})
        for doc, sample in zip(docs, samples):
            if doc in row["ppl"]:
                continue
            ppl = evaluate_perplexity(model, [sample], methods[name], progress=True).ppl
            row["ppl"][doc] = float(ppl)
            write_text_atomic(out, json.dumps(done, indent=1))
            print(f"  {name:<14} {Path(doc).name}: {ppl:.3f}", flush=True)
    rows = {m: done["rows"][m] for m in wanted}
    text = report(rows, args.reference, docs, table, x4)
    print(text)
    out.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
