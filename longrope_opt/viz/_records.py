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


def generation_records(study: optuna.Study) -> list[dict[str, Any]]:
    """Per generation of a `LongRoPESampler` study: trials, best value in it, best so far
    ("best" in the study's direction).

    Trials without a generation tag (another sampler) are skipped; an empty list means the study
    was not run by the LongRoPE sampler.
    """
    better = max if study.direction == optuna.study.StudyDirection.MAXIMIZE else min
    by_gen: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    for t in study.get_trials(deepcopy=False):
        gen = trial_generation(t)
        if gen is None:
            continue
        counts[gen] = counts.get(gen, 0) + 1
        if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value):
            by_gen.setdefault(gen, []).append(t.value)
    records, best = [], math.nan
    for gen in sorted(counts):
        values = by_gen.get(gen, [])
        gen_best = better(values) if values else math.nan
        if values:
            best = gen_best if math.isnan(best) else better(best, gen_best)
        records.append(
            {
                "generation": gen,
                "trials": counts[gen],
                "completed": len(values),
                "best": gen_best,
                "best_so_far": best,
            }
        )
    return records


def length_records(rows: dict[str, dict[int, float]]) -> list[dict[str, Any]]:
    """``{method: {length: ppl}}`` (what `longrope-opt eval` computes) → flat records."""
    return [
        {"method": m, "length": int(length), "ppl": float(ppl)}
        for m, by_length in rows.items()
        for length, ppl in sorted(by_length.items())
    ]
