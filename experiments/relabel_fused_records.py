"""Relabel a measurement store's records that a fused forward made: compute path ``bfloat16-fused``.

Until the measurement store named fusion in its compute path
(`longrope_opt.evaluation.measurement_path`), `extend` (fused element-wise work) and `validate`
(eager) both wrote ``bfloat16``, and fused and eager perplexities differ (``python
bench/fusion_numerics.py``). This moves the records of the given rows and kinds written in a
given time window (when only the fused `extend` wrote them: read from the run logs) to
``bfloat16-fused``, so a table names the path each number came from and ``validate
--remeasure-other-paths`` can measure them again eager. Dry run unless ``--write``; ``--undo``
moves them back (dropping the fused-labelled record where an eager one has been made since).

Only perplexities: branched passkeys run eager on a fused model (`shared_prefix` unfuses it).
That was found after the passkeys of the windows below had been relabelled too; measured again
eager, all 20 at 128k gave the same outcome and answer NLL, and the relabelling was undone.

The Gemma 3 stores, relabelled on 2026-12-05 (the runs' logs: `extend`'s own validation was the
only fused writer inside each window; the one cell both lanes measured at 128k, YaRN-cd's on
`cargo`, printed 10.9492 fused and 10.9572 eager, and the store kept the eager one):

    python experiments/relabel_fused_records.py \\
        --store sqlite:///experiments/results/extend-gemma3-128k.db \\
        --rows extend-gemma3-270m-131072:guarded --kinds ppl \\
        --between 2026-12-05T12:00 2026-12-05T13:30 --write
    python experiments/relabel_fused_records.py \\
        --store sqlite:///experiments/results/extend-gemma3-64k.db \\
        --rows extend-gemma3-270m-65536:guarded,yarn-cd --kinds ppl \\
        --between 2026-11-29T11:30 2026-11-29T13:20 --write
    # the passkeys' relabelling, undone: the same two windows with these rows and --kinds passkey
    #   128k: --rows extend-gemma3-270m-131072:guarded,yarn-cd   64k: as above
    python experiments/relabel_fused_records.py --store … --rows … --kinds passkey \\
        --between … --undo --write
"""

from __future__ import annotations

import argparse

import optuna


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--rows", required=True, help="comma-separated row names")
    p.add_argument("--kinds", required=True, help="comma-separated: ppl, passkey")
    p.add_argument("--between", nargs=2, required=True, metavar=("START", "END"),
                   help="UTC, ISO (2026-12-05T12:00): records written in [START, END)")  # fmt: skip
    p.add_argument("--write", action="store_true", help="write the relabelled records")
    p.add_argument("--undo", action="store_true", help="move bfloat16-fused back to bfloat16")
    args = p.parse_args()
    from longrope_opt.evaluation import STORE_STUDY

    rows, kinds = set(args.rows.split(",")), set(args.kinds.split(","))
    start, end = args.between
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STORE_STUDY, storage=args.store)
    src, dst = ("bfloat16-fused", "bfloat16") if args.undo else ("bfloat16", "bfloat16-fused")
    moved = 0
    for key, by_path in sorted(study.user_attrs.items()):
        record = by_path.get(src) if isinstance(by_path, dict) else None
        kind = key.split(":", 1)[0].split("-", 1)[0]  # ppl:…, passkey-branched-2048:…
        if not record or kind not in kinds or record.get("row") not in rows:
            continue
        if not start <= str(record.get("when", "")) < end:
            continue
        if dst in by_path and not args.undo:
            continue
        print(f"{key}  {record['row']}  {record['when']}  {src} -> {dst}"
              + (" (dropped: one made since)" if dst in by_path else ""))  # fmt: skip
        moved += 1
        if args.write:
            kept = {path: r for path, r in by_path.items() if path != src}
            study.set_user_attr(key, {dst: record, **kept})  # one made since wins
    print(f"{moved} records {'relabelled' if args.write else 'to relabel (dry run: --write)'}")


if __name__ == "__main__":
    main()
