"""Plain data records for the figures, read from a study or an evaluation (no plotting here).

The figure builders take only these records (lists and dicts of numbers), so they are tested on
synthetic records without a model, a study or a browser.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import TrialState

from longrope_opt.rope import METHODS
from longrope_opt.samplers import trial_generation
from longrope_opt.samplers import trial_step
from longrope_opt.studies import ranked_trials
from longrope_opt.studies import record
from longrope_opt.studies import space_of_study
from longrope_opt.studies import study_winner


def lambda_records(study: optuna.Study, methods: tuple[str, ...] = ()) -> dict:
    """λ per RoPE dimension pair: the study's own seeds (PI, NTK, YaRN, YaRN-cd, NTK-cd, ... as
    its trials evaluated them), its best trial, and the winner it ships when another rule chose
    it (re-ranked, guarded); `methods` adds classic methods the study did not seed.

    Returns:
        ``{"target_length": L', "curves": {name: [λ_0, ...]}, "shipped": name}``: seeds are
        named ``"seed yarn-cd"``, the best trial ``"best (trial N)"``, the exported winner
        ``"shipped: <rule> (trial N)"`` (``shipped`` names it; the best trial when it ships);
        ``"native"``: the rope type the λ act on top of (None for the plain RoPE).
    """
    spec = record.read_spec(study)
    curves: dict[str, list[float]] = {}
    target = record.target_length(study) or 0
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for t in sorted(complete, key=lambda t: t.number):
        if t.user_attrs.get("seed"):
            factors = space_of_study(study, t).to_scaling(t.params).factors
            curves[f"seed {t.user_attrs['seed']}"] = [float(x) for x in factors]
    if spec is not None and target:
        for m in methods:
            if f"seed {m}" not in curves:
                curves[m] = [float(x) for x in METHODS[m](spec, target).factors]
    best = ranked_trials(study)[0]
    best_name = f"best (trial {best.number})"
    curves[best_name] = [float(x) for x in space_of_study(study, best).to_scaling(best.params).factors]
    winner = study_winner(study)
    shipped = best_name
    if winner.trial.number != best.number:
        shipped = f"shipped: {winner.rule} (trial {winner.trial.number})"
        curves[shipped] = [float(x) for x in winner.scaling.factors]
    native = None if spec is None or spec.is_native_default else spec.rope_type
    return {"target_length": target, "curves": curves, "shipped": shipped, "native": native}


def progress_records(study: optuna.Study) -> dict[str, Any]:
    """How a search went, trial by trial, for any sampler: each finished trial's value, the best
    so far, which trials were seeds, model steps or pruned, and generations where the sampler
    keeps more than one (the paper's evolution; the default's trust-region steps and screened
    children all sit in generation 0, and Optuna's and nevergrad's samplers have none).

    Returns:
        ``{"trials": [...], "generations": bool, "maximize": bool}``; each trial is
        ``{"number", "value", "best_so_far", "kind", "generation", "seed", "reports"}``: `kind` is
        ``"seed"``, ``"model step"``, ``"candidate"`` or ``"pruned"`` (its value is its last
        report, e.g. its fitness on the documents it read before it stopped; it never counts as
        best), `reports` how many it made.
    """
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    better = max if maximize else min
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    rows: list[dict[str, Any]] = []
    best = math.nan
    for t in sorted(finished, key=lambda t: t.number):
        reports = t.intermediate_values
        if t.state == TrialState.COMPLETE:
            value = t.value if t.value is not None and math.isfinite(t.value) else math.nan
            if not math.isnan(value):
                best = value if math.isnan(best) else better(best, value)
            kind = "seed" if t.user_attrs.get("seed") else (
                "model step" if trial_step(t) == "model" else "candidate")  # fmt: skip
        else:
            value = reports[max(reports)] if reports else math.nan
            kind = "pruned"
        rows.append({"number": t.number, "value": value, "best_so_far": best, "kind": kind,
                     "generation": trial_generation(t), "seed": t.user_attrs.get("seed"),
                     "reports": len(reports)})  # fmt: skip
    generations = len({r["generation"] for r in rows if r["generation"] is not None}) > 1
    return {"trials": rows, "generations": generations, "maximize": maximize}


def length_records(rows: dict[str, dict[int, float]]) -> list[dict[str, Any]]:
    """``{method: {length: ppl}}`` (what `longrope-opt eval` computes) → flat records."""
    return [
        {"method": m, "length": int(length), "ppl": float(ppl)}
        for m, by_length in rows.items()
        for length, ppl in sorted(by_length.items())
    ]
