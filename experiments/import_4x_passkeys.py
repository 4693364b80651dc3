"""Import the 4x table's passkey outcomes (experiments/results/extend-4x.json) into a measurement store.

The 4x table measured 20 passkeys per row at 16,384 and 32,768 tokens with the prompts of
`passkey_prompts(seed=0)` — the prompts `validate` uses. Passkey prompts do not depend on the
corpus, so those outcomes serve every validation table of the same model: this writes each one
under the key `validate` looks up (model fingerprint, prompt tokens, length, scaling), with the
compute path the table recorded for it ("unrecorded" where it recorded none). The classic rows'
scalings are recomputed and must match; the search rows are read from their studies.

    python experiments/import_4x_passkeys.py --store sqlite:///experiments/results/measurements.db
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import optuna


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", default="experiments/results/extend-4x.json")
    p.add_argument("--studies", default="sqlite:///experiments/results/extend-4x.db")
    p.add_argument("--store", required=True)
    args = p.parse_args()
    from longrope_opt import RopeSpec
    from longrope_opt.evaluation import MeasurementStore
    from longrope_opt.evaluation import classic_rows
    from longrope_opt.evaluation import measurement_key
    from longrope_opt.evaluation import model_fingerprint
    from longrope_opt.evaluation import tokens_hash
    from longrope_opt.models import load_model
    from longrope_opt.objectives import passkey_prompts
    from longrope_opt.studies import space_of_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    raw = json.loads(Path(args.table).read_text())
    model, tok = load_model("smollm2-135m", fuse=False)
    fingerprint = model_fingerprint(model)
    spec = RopeSpec.from_config(model.config)
    searched = {"new-search": "4x-new", "plain-search": "4x-plain"}
    imported = 0
    for length in (16384, 32768):
        scalings = {r.name: r.scaling for r in classic_rows(spec, length)}
        for row, study_name in searched.items():
            study = optuna.load_study(study_name=study_name, storage=args.studies)
            trial = study.get_trials(deepcopy=False)[raw[row]["trial"]]
            scalings[row] = space_of_study(study, trial).to_scaling(trial.params)
        prompts = passkey_prompts(tok, length, n_trials=20, seed=0)
        for row, scaling in scalings.items():
            outcomes = raw.get(row, {}).get(f"passkey{length}", [])
            ranges = raw.get(row, {}).get("compute", {}).get(f"passkey{length}", {})
            for j, correct in enumerate(outcomes):
                path = next((p for r, p in ranges.items()
                             if int(r.split("-")[0]) <= j <= int(r.split("-")[1])), "unrecorded")  # fmt: skip
                store = MeasurementStore(args.store, path=path)
                key = measurement_key("passkey", fingerprint, tokens_hash(prompts[j].ids), length,
                                      scaling)  # fmt: skip
                if store.get(key) is None:
                    store.put(key, [bool(correct), None], row=row, imported=args.table)
                    imported += 1
    print(f"imported {imported} passkey outcomes into {args.store}")


if __name__ == "__main__":
    main()
