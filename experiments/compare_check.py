"""Re-check a `compare` run's winners at full fidelity on documents no study saw (issues 5, 16).

Takes the best trial of every study in a comparison (the re-ranked winner when a study was
re-ranked) and the seed trials every study was given, and evaluates them with full-length
perplexity at the comparison's target on `--held-out` documents that none of the studies
searched on, in one process. Prints per-document perplexities and each candidate's paired
difference in log perplexity against the best seed (mean over documents, and its range).

    python experiments/compare_check.py --storage sqlite:///bench/results/compare.db \
        --prefix compare-smollm2-135m-16384-skip
    python experiments/compare_check.py --storage sqlite:///bench/results/compare-seeded-16k.db \
        --prefix compare-smollm2-135m-16384-truncate-critical-seeded --held-out 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="sqlite:///bench/results/compare.db")
    parser.add_argument("--prefix", default="compare-smollm2-135m-16384-skip")
    parser.add_argument("--held-out", type=int, default=2, help="documents no study searched on")
    parser.add_argument("--seed", type=int, default=1, help="chooses the held-out documents")
    parser.add_argument("--out", default=None, help="also write the raw numbers as JSON here")
    args = parser.parse_args()

    import optuna

    from longrope_opt.data import load_samples
    from longrope_opt.models import load_model
    from longrope_opt.objectives import evaluate_perplexity
    from longrope_opt.studies import SearchConfig
    from longrope_opt.studies import best_scaling
    from longrope_opt.studies import record
    from longrope_opt.studies import space_of_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = sorted(
        s.study_name
        for s in optuna.get_all_study_summaries(args.storage)
        if s.study_name.startswith(args.prefix + "/")
    )
    if not names:
        parser.error(f"--prefix: no study named {args.prefix}/… in {args.storage}")
    rows: dict[str, tuple[float, object]] = {}
    searched: set[str] = set()
    config = None
    for name in names:
        study = optuna.load_study(study_name=name, storage=args.storage)
        config = config or SearchConfig.from_study(study)
        searched |= set(record.read_provenance(study).get("doc_ids", []))
        scaling, trial = best_scaling(study)
        sampler = name.split("/")[1]
        if sampler not in rows or trial.value < rows[sampler][0]:
            rows[sampler] = (trial.value, scaling)
        for t in study.get_trials(deepcopy=False):
            label = t.user_attrs.get("seed")
            if label and t.value is not None and f"seed {label}" not in rows:
                rows[f"seed {label}"] = (t.value, space_of_study(study, t).to_scaling(t.params))
    assert config is not None
    model, tokenizer = load_model(config.model, fuse=True)
    exclude = searched | set(config.exclude_docs or ())
    L = config.target_length
    docs = load_samples(config.corpus, tokenizer, L, args.held_out, args.seed, exclude=exclude)
    print(f"held-out documents: {docs.doc_ids} (searched: {sorted(searched)})", file=sys.stderr)
    raw = {}
    for label, (value, scaling) in rows.items():
        start = time.perf_counter()
        raw[label] = {
            "search_value": value,
            "ppl": evaluate_perplexity(model, docs, scaling).sample_ppl,
        }
        print(f"  {label:<20} {np.round(raw[label]['ppl'], 4).tolist()} "
              f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)  # fmt: skip
    seeds = [k for k in raw if k.startswith("seed ")]
    ref = min(seeds, key=lambda k: np.mean(np.log(raw[k]["ppl"]))) if seeds else None
    print(f"\n{args.prefix}: each sampler's best and the seeds, full-length perplexity at {L} on "
          f"{len(docs)} held-out document(s); Δ = paired log-ppl difference vs {ref}")  # fmt: skip
    print(f"{'candidate':<20}{'search value':>13}{'held-out ppl':>14}{'Δ mean':>9}{'Δ range':>20}")
    for label in sorted(raw, key=lambda k: np.mean(np.log(raw[k]["ppl"]))):
        logs = np.log(raw[label]["ppl"])
        d = logs - np.log(raw[ref]["ppl"]) if ref else np.full_like(logs, math.nan)
        print(f"{label:<20}{raw[label]['search_value']:13.4f}{math.exp(logs.mean()):14.4f}"
              f"{d.mean():+9.4f}   [{d.min():+.4f}, {d.max():+.4f}]")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"docs": docs.doc_ids, "rows": raw}, indent=1))


if __name__ == "__main__":
    main()
