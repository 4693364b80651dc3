"""Does the branched passkey form measure what the single-key form measures?

For each length and classic row, the same prompts (`passkey_prompts`, seed 0, as `validate`)
are measured in both forms (`passkey_results(form=...)`) and compared key by key: retrieved
counts with Wilson intervals, keys on which the forms agree, mean answer NLL. Every outcome is
kept in a measurement store under the keys `validate` uses, so `validate` reuses them (and this
script reuses what `validate` stored: the single form's 32k outcomes of the classic rows, say).
Lengths inside the trained window measure the unscaled model only (row ``none``).

    python experiments/passkey_forms.py --lengths 4000,8000 --rows none
    python experiments/passkey_forms.py --lengths 16384 --out experiments/results/passkey-forms.json
    python experiments/passkey_forms.py --lengths 32768 --single stored   # measure branched only
    python experiments/passkey_forms.py --model gemma3-270m --lengths 16000,32000 --rows none \
        --store sqlite:///experiments/results/passkey-forms-gemma3.db --out experiments/results/passkey-forms-gemma3.json

Resumable: a rerun measures only what the store lacks.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from datetime import datetime
from pathlib import Path

import optuna
import torch
from tqdm.auto import tqdm

from longrope_opt.evaluation import STORE_STUDY
from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import classic_rows
from longrope_opt.evaluation import measurement_key
from longrope_opt.evaluation import model_fingerprint
from longrope_opt.evaluation import tokens_hash
from longrope_opt.evaluation import wilson
from longrope_opt.models import load_model
from longrope_opt.objectives import passkey_kind
from longrope_opt.objectives import passkey_prompts
from longrope_opt.objectives import passkey_results
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeSpec


def form_seconds(records: list[dict]) -> float | None:
    """Seconds the keys of one form took, over every run that measured some of them.

    A record's ``seconds`` counts from the start of the run (batch) that stored it, so a batch
    is the records sharing ``when - seconds`` (to a few seconds), and its cost is its largest
    ``seconds``. Summing the last record's alone would count only the run that finished.
    """
    batches: list[list[float]] = []  # [start, longest seconds]
    for r in records:
        if r.get("seconds") is None or not r.get("when"):
            return None  # a record without its time: the total would be a guess
        start = datetime.strptime(r["when"], "%Y-%m-%dT%H:%M:%S%z").timestamp() - r["seconds"]
        for b in batches:
            if abs(b[0] - start) < 3.0:  # `when` is to the second
                b[1] = max(b[1], r["seconds"])
                break
        else:
            batches.append([start, r["seconds"]])
    return sum(b[1] for b in batches) if batches else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--lengths", default="4000,8000")
    parser.add_argument("--rows", default="none,pi,ntk,yarn,yarn-cd,ntk-cd")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--lead-in", type=int, default=None,
                        help="the branched form's lead-in (default the library's); another "
                        "value is stored under its own kind")
    parser.add_argument("--single", choices=("measure", "stored"), default="measure",
                        help="'stored': use only the single form's stored outcomes (no forward)")
    parser.add_argument("--store", default="sqlite:///experiments/results/measurements.db")
    parser.add_argument("--out", default=None, help="append the summary lines to this JSON list")
    args = parser.parse_args()
    # the lead-in measured: the one asked for, else the library's default
    lead_in = args.lead_in or inspect.signature(passkey_results).parameters["lead_in"].default
    model, tokenizer = load_model(args.model)
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path", "unknown")
    store = MeasurementStore(args.store, path=path)
    stored = optuna.load_study(study_name=STORE_STUDY, storage=args.store)  # records' times
    spec = RopeSpec.from_config(model.config)
    fingerprint = model_fingerprint(model)
    lines = []
    for n in (int(x) for x in args.lengths.split(",")):
        wanted = ["none"] if n <= spec.original_length else args.rows.split(",")
        rows = {r.name: r for r in classic_rows(spec, max(n, spec.original_length + 1))}
        prompts = passkey_prompts(tokenizer, n, n_trials=args.keys, seed=0)
        for name in wanted:
            scaling = None if name == "none" else rows[name].scaling
            got = {}
            branched = passkey_kind("branched", lead_in)
            for form, kind in (("single", "passkey"), ("branched", branched)):
                keys = [measurement_key(kind, fingerprint, tokens_hash(p.ids), n, scaling)
                        for p in prompts]
                todo = [j for j, k in enumerate(keys) if store.get(k) is None]
                if todo and form == "single" and args.single == "stored":
                    break
                start = time.perf_counter()  # this batch's records count from here
                patch = apply_rope_scaling(model, scaling) if scaling is not None else None
                with torch.inference_mode():
                    if patch is not None:
                        patch.__enter__()
                    try:
                        chosen = [prompts[j] for j in todo]
                        lead = {} if args.lead_in is None else {"lead_in": args.lead_in}
                        results = passkey_results(model, chosen, form=form, **lead)
                        bar = tqdm(results, total=len(chosen), unit="key",
                                   desc=f"{n} {name} {form}")  # an hour a row at 32k on 2 cores
                        for i, correct, nll in bar:
                            store.put(keys[todo[i]], [bool(correct), float(nll)],
                                      seconds=time.perf_counter() - start, row=name)
                    finally:
                        if patch is not None:
                            patch.__exit__(None, None, None)
                attrs = stored.user_attrs  # read again: this run's records included
                seconds = form_seconds([(attrs.get(k) or {}).get(store.path, {}) for k in keys])
                outcomes = [store.get(k)[0] for k in keys]
                got[form] = {"correct": [bool(o[0]) for o in outcomes],
                             "nll": [o[1] for o in outcomes], "seconds": seconds}
            if len(got) < 2:
                print(f"{n} {name}: no stored single-form outcomes; skipped")
                continue
            s, b = got["single"], got["branched"]
            agree = sum(x == y for x, y in zip(s["correct"], b["correct"]))
            both = [(x, y) for x, y in zip(s["nll"], b["nll"]) if x is not None and y is not None]
            line = {
                "model": args.model, "length": n, "row": name, "keys": args.keys,
                "lead_in": lead_in,
                "single": sum(s["correct"]), "branched": sum(b["correct"]),
                "single_wilson": wilson(sum(s["correct"]), args.keys),
                "branched_wilson": wilson(sum(b["correct"]), args.keys),
                "agree": agree,
                "single_only": sum(x and not y for x, y in zip(s["correct"], b["correct"])),
                "branched_only": sum(y and not x for x, y in zip(s["correct"], b["correct"])),
                "nll_single": sum(x for x, _ in both) / len(both) if both else None,
                "nll_branched": sum(y for _, y in both) / len(both) if both else None,
                "seconds": {"single": s["seconds"], "branched": b["seconds"]},
                "cpu_path": path,
            }
            lines.append(line)
            print(f"{n:>6} {name:<8} single {line['single']:>2}/{args.keys} "
                  f"[{line['single_wilson'][0]:.2f}, {line['single_wilson'][1]:.2f}]  "
                  f"branched {line['branched']:>2}/{args.keys} "
                  f"[{line['branched_wilson'][0]:.2f}, {line['branched_wilson'][1]:.2f}]  "
                  f"agree {agree}/{args.keys} (+{line['single_only']} single only, "
                  f"+{line['branched_only']} branched only)  "
                  f"NLL {line['nll_single'] or float('nan'):.3f} vs "
                  f"{line['nll_branched'] or float('nan'):.3f}  "
                  f"s {s['seconds'] and round(s['seconds'])} / {b['seconds'] and round(b['seconds'])}",
                  flush=True)
    if args.out and lines:
        out = Path(args.out)
        old = json.loads(out.read_text()) if out.exists() else []
        def setting(x):  # one line per setting
            return (x.get("model", "smollm2-135m"), x["length"], x["row"], x.get("lead_in"))

        done = {setting(x) for x in lines}
        old = [x for x in old if setting(x) not in done]
        out.write_text(json.dumps(old + lines, indent=1) + "\n")


if __name__ == "__main__":
    main()
