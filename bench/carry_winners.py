"""The 4x searches' winners carried to another scale and measured there, without a search there.

At 8x (65,536 tokens) one forward of SmolLM2 takes ~23 min on 2 CPU cores, so the 4x recipe
(48 trials at the target, a re-rank, 20 passkeys per length) would take ~18 h of search per row.
This bench gives the search rows at the new scale the cheap way: each study's re-ranked winner
from the 4x table (`--from`), carried by one rule, measured on the held-out windows of the new
table (`--out`, made by `studies/extend_4x_smollm2.py --stage classic`). A carried row is not a
search at the new scale; the table names it ``<study>-carried``.

The rule: what grows with ln s grows by k = ln s' / ln s. λ' = λ^k, so λ = 1 stays 1, λ = s
becomes s', and a ramp λ_i = s^(i/c) stays that ramp; t'² = 1 + (t² - 1)·k, which keeps the
table's rule for t (LongRoPE's t² = 1 + ln s / ln L); n̂ is kept (it counts tokens). It carries PI, NTK and YaRN-cd at s to
themselves at s' (tests/studies_tests/test_carry_winners.py).

    python studies/extend_4x_smollm2.py --stage classic --target-length 65536 --held-out 1 \\
        --keys 0 --out bench/results/extend-8x
    python bench/carry_winners.py --studies new,plain --out bench/results/extend-8x

Each row costs one forward per window and is saved when made; a rerun skips the rows already
measured with the same factors on the same windows. Do not run it while the table script writes
the same `--out`: each keeps its own copy of the results and saves it whole.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--from", dest="source", default=str(ROOT / "bench" / "results" / "extend-4x"),
                   help="the searched table's prefix (<from>.db, <from>.json)")  # fmt: skip
    p.add_argument("--from-length", type=int, default=32768, help="its target length")
    p.add_argument("--studies", default="new", help="whose winners (plain, new, floor)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "extend-8x"),
                   help="the new table's prefix (<out>.json, <out>.txt)")  # fmt: skip
    p.add_argument("--target-length", type=int, default=65536)
    p.add_argument("--held-out", type=int, default=1, help="windows, as the new table's")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--corpus", default="builtin")
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()
    args.studies = [n.strip() for n in args.studies.split(",") if n.strip()]
    if args.held_out < 1:
        p.error(f"--held-out must be an integer >= 1, got {args.held_out}")
    return args


def carry(scaling, scale_from: float, scale_to: float, name: str):
    """`scaling` (found for scale `scale_from`) at `scale_to`: λ^k, n̂, √(1 + (t² - 1)·k), with
    k = ln scale_to / ln scale_from (both scales > 1)."""
    from longrope_opt import RopeScaling

    k = math.log(scale_to) / math.log(scale_from)
    t2 = 1.0 + (scaling.attention_scale**2 - 1.0) * k
    if t2 <= 0:  # only a t well under 1 carried far: no t follows the rule there
        raise ValueError(f"t = {scaling.attention_scale} cannot be carried by {k:.3f}")
    t = math.sqrt(t2)
    return RopeScaling(scaling.factors**k, scaling.n_hat, t, method=name)


def same_row(a: dict, b: dict) -> bool:
    """Whether two carried rows' identities name one scaling. The factors and t are compared to
    1e-9: the same winner carried on another machine can differ in the last bit of a power, and
    that must not cost another forward (~16 min at 8x)."""
    if set(a) != set(b) or a.get("n_hat") != b.get("n_hat") or a.get("from") != b.get("from"):
        return False
    fa, fb = np.asarray(a["factors"], float), np.asarray(b["factors"], float)
    return fa.shape == fb.shape and bool(
        np.allclose(fa, fb, rtol=1e-9, atol=0) and math.isclose(a["t"], b["t"], rel_tol=1e-9)
    )


def main() -> None:
    args = parse()
    spec = importlib.util.spec_from_file_location("x4", ROOT / "studies" / "extend_4x_smollm2.py")
    x4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(x4)
    unknown = set(args.studies) - set(x4.STUDIES)
    if not args.studies or unknown:
        x4.fail(f"--studies must name some of {', '.join(x4.STUDIES)}, got {args.studies}")
    out = Path(f"{args.out}.json")
    if not out.is_file():
        x4.fail(f"--out: no table at {out} (run studies/extend_4x_smollm2.py --stage classic "
                f"--target-length {args.target_length} --out {args.out} first)")  # fmt: skip

    from longrope_opt import RopeSpec
    from longrope_opt.errors import LongRopeOptError
    from longrope_opt.files import write_text_atomic
    from longrope_opt.objectives import evaluate_perplexity

    _, model, tok, rows = x4.load_table(
        args.source, args.model, args.dtype, args.from_length, "--from-length"
    )
    x4.above_trained(model, "--target-length", args.target_length)
    missing = [n for n in args.studies if f"{n}-search" not in rows]
    if missing:
        x4.fail(f"--studies: no re-ranked winner of {missing} in {args.source}.db")
    try:
        held = x4.held_out(args.corpus, tok, args.target_length, args.held_out)
    except LongRopeOptError as exc:
        x4.fail(str(exc))
    path = getattr(model, "longrope_opt_compute", {}).get("path", args.dtype)
    trained = RopeSpec.from_config(model.config).original_length
    s_from, s_to = args.from_length / trained, args.target_length / trained
    for name in args.studies:
        carried = carry(rows[f"{name}-search"], s_from, s_to, f"{name}-carried")
        identity = {"factors": carried.factors.tolist(), "n_hat": int(carried.n_hat),
                    "t": float(carried.attention_scale), "from": args.from_length}  # fmt: skip
        raw = json.loads(out.read_text())
        row = raw.get(f"{name}-carried", {})
        if same_row(row.get("identity", {}), identity) and row.get("docs") == held.doc_ids:
            print(f"  {name}-carried: measured already")
            continue
        ppl = evaluate_perplexity(model, held, carried, progress=True).sample_ppl
        raw = json.loads(out.read_text())  # as it is now, so rows saved meanwhile are kept
        raw[f"{name}-carried"] = {"ppl": ppl, "docs": held.doc_ids, "identity": identity,
                                  "compute": {"ppl": path}}  # fmt: skip
        write_text_atomic(out, json.dumps(raw, indent=1))
        print(f"  {name}-carried ppl {np.round(ppl, 3).tolist()}", flush=True)
    table = x4.stats.report(json.loads(out.read_text()), args.target_length, held.doc_ids)
    print(table)
    out.with_suffix(".txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
