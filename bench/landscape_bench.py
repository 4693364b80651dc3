"""Every sampler on every λ landscape (`bench/landscapes.py`): median regret by budget.

One run = one sampler, one landscape at one scale (4× or 8× of SmolLM2), one seed, `--trials`
trials; its regret at a budget B is the best *true* value among its first B trials minus the
landscape's known optimum (on the noisy landscape: the true value of the trial it observed as best;
on the constrained one: the best feasible value, ∞ before the first feasible trial). The 10-, 20-,
30-, 100- and 300-trial columns come from the same runs (anytime regret), so a sampler that
adapts to its budget is told the largest (`budget=300`) and judged at each.

Every seeded sampler gets the space's five seeds (PI, NTK, YaRN, YaRN-cd, NTK-cd) enqueued as its
first trials; the plain GA (`evolution`) starts from random vectors, as its registry entry says.
Constraints reach the samplers that take Optuna's `constraints_func` (the LongRoPE samplers, TPE,
GP); the others (nevergrad's, CMA-ES, random) see a penalised value, f + 1000·max(0, c), which is
what a user of those samplers would write.

    python -m bench.landscape_bench                    # every sampler, landscape, scale: 5 seeds
    python -m bench.landscape_bench --samplers gp --landscapes quadratic --scales 4
    python -m bench.landscape_bench --samplers gp --trials 300 --jobs 2   # two runs at a time
    python -m bench.landscape_bench --samplers gp --trials 300 --jobs 2 --checkpoints runs/
                                                       # ... each resumable mid-run
    python -m bench.landscape_bench --samplers longrope --first-seed 10 --seeds 20 --trials 30 \
        --out /tmp/tuning.jsonl                        # tuning seeds, small budgets only
    python -m bench.landscape_bench --table            # print the table from the results file
    python -m bench.landscape_bench --leaders          # the default against the best peer, by cell

Results go to one JSON line per run in `--out` (default bench/results/landscapes.jsonl); a rerun
skips the runs already there (with `--trials` trials and every budget up to them), so an
interrupted benchmark continues where it stopped, and a run recorded before a budget was added
(or stopped short, as GP's first 100-trial runs) is run again.
"""

from __future__ import annotations

import os


# One BLAS thread: the samplers' small solves are slower threaded when cores are shared (and
# the figures compare search quality; `bench/sampler_overhead.py` measures the cost).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import multiprocessing
import sys
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed
from pathlib import Path

import numpy as np


#: The budgets real searches have (10-30 trials: a CPU trial at 32k costs minutes) and the
#: long ones.
BUDGETS = (10, 20, 30, 100, 300)
PENALTY = 1000.0
#: Seeds a sampler's median needs to count in `leaders`.
MIN_SEEDS = 2
#: Peers first, then the LongRoPE sampler's variants.
SAMPLERS = ("random", "tpe", "gp", "cmaes", "ngopt", "cma", "twopointsde", "evolution",
            "longrope-paper", "longrope-adaptive", "longrope")  # fmt: skip
CONSTRAINED_OK = ("longrope", "longrope-paper", "longrope-adaptive", "evolution", "tpe", "gp")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "landscapes.jsonl"


def make(name: str, space, seed: int, budget: int, constraints_func=None):
    """The sampler called `name` (the registry's, and Optuna's GPSampler as ``gp``)."""
    import optuna

    from longrope_opt.samplers import make_sampler

    with warnings.catch_warnings():
        # GP is experimental, TPE's constraints_func deprecated in Optuna 5: both on purpose
        warnings.simplefilter("ignore")
        if name == "gp":
            return optuna.samplers.GPSampler(
                seed=seed, constraints_func=constraints_func, warn_independent_sampling=False
            )
        if name == "tpe":
            return optuna.samplers.TPESampler(
                multivariate=True, seed=seed, constraints_func=constraints_func
            )
        return make_sampler(
            name, space=space, seed=seed, budget=budget, constraints_func=constraints_func
        )


def run(instance, sampler_name: str, seed: int, trials: int,
        checkpoint: Path | None = None) -> dict:  # fmt: skip
    """One run; returns its JSON record (regret per budget, seconds per trial).

    With `checkpoint` (a journal file) the run's study lives there, so a run killed part-way
    (GP to 300 trials is minutes of one core, more beside other work) continues from its last trial
    when called again. The continuation is still a run of that sampler from those seeds, but not
    the trial sequence an uninterrupted run would have made: a sampler's random state restarts
    from its seed.
    """
    import optuna

    from longrope_opt.samplers import enqueue_space_seeds

    constrained = instance.constraint is not None
    native = constrained and sampler_name in CONSTRAINED_OK

    def constraints_func(trial):
        return (trial.user_attrs["violation"],)

    sampler = make(sampler_name, instance.space, seed, trials,
                   constraints_func if native else None)  # fmt: skip
    study = _study(sampler, checkpoint)
    if not study.trials and sampler_name != "evolution":
        enqueue_space_seeds(study, instance.space)

    def objective(trial) -> float:
        instance.space.suggest(trial)
        params = trial.params
        trial.set_user_attr("true", instance.true_value(params))
        value = instance.observed(params)
        if constrained:
            v = instance.violation(params)
            trial.set_user_attr("violation", v)
            if not native:
                value += PENALTY * max(0.0, v)
        return value

    finished = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    before = study.user_attrs.get("seconds", 0.0)  # what the pieces before this one took
    t0 = time.perf_counter()

    def keep_time(study, trial) -> None:
        study.set_user_attr("seconds", before + time.perf_counter() - t0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.optimize(objective, n_trials=max(trials - finished, 0),
                       callbacks=[keep_time] if checkpoint else None)  # fmt: skip
    seconds = before + time.perf_counter() - t0
    done = [t for t in study.trials if t.value is not None]
    true = np.array([t.user_attrs["true"] for t in done])
    seen = np.array([t.value for t in done])
    feasible = np.array([t.user_attrs.get("violation", -1.0) <= 0 for t in done])
    regret = {}
    for b in BUDGETS:
        if b > len(done):
            continue
        ok = feasible[:b]
        if not ok.any():
            regret[str(b)] = math.inf
            continue
        if instance.noise:  # the point the run believes best, judged without the noise
            pick = np.flatnonzero(ok)[np.argmin(seen[:b][ok])]
            regret[str(b)] = float(true[pick] - instance.optimum)
        else:
            regret[str(b)] = float(true[:b][ok].min() - instance.optimum)
    return {
        "landscape": instance.name,
        "scale": int(round(instance.space.spec.scale(instance.space.target_length))),
        "sampler": sampler_name,
        "seed": seed,
        "trials": len(done),
        "regret": regret,
        "ms_per_trial": 1e3 * seconds / max(len(done), 1),
    }


def _study(sampler, checkpoint: Path | None):
    """A fresh in-memory study, or the one in the journal `checkpoint`, with the trial a killed
    run left running failed (and enqueued again if it was a seed)."""
    import optuna

    if checkpoint is None:
        return optuna.create_study(sampler=sampler)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(checkpoint)))
    study = optuna.create_study(storage=storage, sampler=sampler, study_name="run",
                                load_if_exists=True)  # fmt: skip
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if "fixed_params" in t.system_attrs:
            study.enqueue_trial(t.system_attrs["fixed_params"])
    return study


def _key(r: dict) -> tuple:
    return r["landscape"], r["scale"], r["sampler"], r["seed"]


def complete(record: dict, trials: int) -> bool:
    """Whether a recorded run has `trials` trials and the regret at every budget up to them."""
    return record["trials"] >= trials and all(
        str(b) in record["regret"] for b in BUDGETS if b <= trials
    )


def read(path: Path) -> list[dict]:
    """Every run of a results file. Records of the same run (landscape, scale, sampler, seed)
    merge: a run is the same trial sequence however long it went (every sampler is seeded), so
    a shorter rerun that adds a budget (GP's 10/20 beside its earlier 100) keeps the longer
    run's other budgets; for a budget both hold, the later record wins."""
    if not path.exists():
        return []
    records: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            old = records.get(_key(r))
            if old is not None:
                longer = old if old["trials"] > r["trials"] else r  # its cost per trial
                r = {**r, "regret": {**old["regret"], **r["regret"]},
                     "trials": longer["trials"], "ms_per_trial": longer["ms_per_trial"]}  # fmt: skip
            records[_key(r)] = r
    return list(records.values())


def _reached(rows: list[dict], sampler: str, budget: int) -> list[float]:
    """The regrets at `budget` of `sampler`'s runs that went that far (GP's 300 is still filling)."""
    return [
        r["regret"][str(budget)]
        for r in rows
        if r["sampler"] == sampler and str(budget) in r["regret"]
    ]


def table(records: list[dict], samplers: list[str] | None = None) -> str:
    """Median regret [min, max] over seeds, sampler × landscape × scale × budget."""
    from bench.landscapes import LANDSCAPES

    names = samplers or [s for s in SAMPLERS if any(r["sampler"] == s for r in records)]
    lines = []
    for landscape in LANDSCAPES:
        for scale in sorted({r["scale"] for r in records}):
            rows = [r for r in records if r["landscape"] == landscape and r["scale"] == scale]
            if not rows:
                continue
            lines.append(f"\n{landscape} {scale}x  (median regret [min, max] over seeds)")
            lines.append(f"{'sampler':<20}" + "".join(f"{b:>27}" for b in BUDGETS) + f"{'ms/trial':>10}")
            best = {}
            for b in BUDGETS:
                # a median counts for the star on the same terms as in `leaders`
                meds = [np.median(v) for s in names if len(v := _reached(rows, s, b)) >= MIN_SEEDS]
                best[b] = min(meds) if meds else math.inf
            for s in names:
                mine = [r for r in rows if r["sampler"] == s]
                if not mine:
                    continue
                cells = []
                for b in BUDGETS:
                    v = _reached(mine, s, b)
                    if not v:
                        cells.append("—")
                        continue
                    med = float(np.median(v))
                    mark = "*" if med <= best[b] and len(v) >= MIN_SEEDS else " "
                    # a column still being run (GP's 300): say on how many seeds
                    if len(v) < len(mine):
                        cells.append(f"{_num(med)}{mark} ({len(v)} of {len(mine)} seeds)")
                    else:
                        cells.append(f"{_num(med)}{mark} [{_num(min(v))}, {_num(max(v))}]")
                ms = np.mean([r["ms_per_trial"] for r in mine])
                lines.append(f"{s + ' (' + str(len(mine)) + ')':<20}"
                             + "".join(f"{c:>27}" for c in cells) + f"{ms:10.1f}")  # fmt: skip
    lines.append(
        f"\n* the best median of the column (ties marked alike; a median needs {MIN_SEEDS} seeds); "
        "(n) = seeds run; (k of n seeds): the median of the k runs that reached the budget"
    )
    return "\n".join(lines)


def leaders(records: list[dict], default: str = "longrope") -> str:
    """Per landscape × scale × budget: the default's median regret against the best peer's
    (the lowest median among the other samplers with every seed at that budget), beside the
    paper's operators (Algorithm 1: the default before the model)."""
    from bench.landscapes import LANDSCAPES

    lines = [f"{'landscape':<16}{'budget':>6}{'paper ops':>12}{default:>12}   best peer"]
    behind = 0
    for landscape in LANDSCAPES:
        for scale in sorted({r["scale"] for r in records}):
            rows = [r for r in records if r["landscape"] == landscape and r["scale"] == scale]
            for b in BUDGETS:
                meds, seeds = {}, {}
                for s in sorted({r["sampler"] for r in rows}):
                    mine = _reached(rows, s, b)
                    if len(mine) >= MIN_SEEDS:
                        meds[s], seeds[s] = float(np.median(mine)), len(mine)
                if default not in meds:
                    continue
                peers = {s: v for s, v in meds.items() if s != default and not s.startswith("longrope")}
                if not peers:
                    continue
                peer = min(peers, key=lambda s: peers[s])
                ours, theirs = meds[default], peers[peer]
                paper = _num(meds["longrope-paper"]) if "longrope-paper" in meds else "—"
                if ours <= theirs:
                    verdict = "leads"
                else:
                    behind += 1
                    ratio = ours / theirs if theirs > 0 else math.inf
                    verdict = f"behind by {ratio:.1f}x"
                few = f" ({seeds[peer]} seeds)" if seeds[peer] < seeds[default] else ""
                lines.append(f"{landscape + ' ' + str(scale) + 'x':<16}{b:>6}{paper:>12}{_num(ours):>12}   "
                             f"{peer} {_num(theirs)}{few}  {verdict}")  # fmt: skip
    lines.append(f"\n{behind} cells where a peer's median is lower (peers: every sampler but the "
                 f"LongRoPE variants; each median over the seeds that reached the budget, at least "
                 f"{MIN_SEEDS})")
    return "\n".join(lines)


def _num(x: float) -> str:
    if math.isinf(x):
        return "inf"
    return f"{x:.4f}" if abs(x) < 100 else f"{x:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--landscapes", default="all")
    parser.add_argument("--scales", default="4,8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds --first-seed … --first-seed + --seeds - 1 (tuning uses 10-29, "
                        "which the table does not)")
    parser.add_argument("--trials", type=int, default=max(BUDGETS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--table", action="store_true", help="print the table and exit")
    parser.add_argument("--leaders", action="store_true",
                        help="print, per landscape and budget, the default against the best peer")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time, one process and one thread each (GP to 300 trials "
                        "is minutes of one core a run: `--jobs 2` uses both cores of a 2-core machine)")
    parser.add_argument("--checkpoints", type=Path, default=None, metavar="DIR",
                        help="keep each run's study in DIR (a journal file per run), so that a "
                        "run killed part-way continues from its last trial when the command is "
                        "run again (default: in memory; a killed run starts over)")
    args = parser.parse_args()

    from bench.landscapes import LANDSCAPES

    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    landscapes = list(LANDSCAPES) if args.landscapes == "all" else args.landscapes.split(",")
    for name in landscapes:
        if name not in LANDSCAPES:
            parser.error(f"--landscapes: {name!r} is not one of {list(LANDSCAPES)}")
    if args.table:
        print(table(read(args.out), samplers))
        return
    if args.leaders:
        print(leaders(read(args.out)))
        return
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    scales = [int(s) for s in args.scales.split(",")]
    done = {_key(r) for r in read(args.out) if complete(r, args.trials)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cells = [(landscape, scale, sampler, seed)
             for seed in range(args.first_seed, args.first_seed + args.seeds)
             for landscape in landscapes for scale in scales for sampler in samplers
             if (landscape, scale, sampler, seed) not in done]  # fmt: skip
    if args.jobs == 1:
        records = (_cell(*cell, args.trials, args.checkpoints) for cell in cells)
        _append(records, args.out)
        return
    # Each record is appended as its run ends, in whatever order: `read` keys them by run.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        futures = [pool.submit(_cell, *cell, args.trials, args.checkpoints) for cell in cells]
        _append((f.result() for f in as_completed(futures)), args.out)


def _cell(landscape: str, scale: int, sampler: str, seed: int, trials: int,
          checkpoints: Path | None = None) -> dict:  # fmt: skip
    # imported where the run happens: a spawned worker starts from a bare interpreter
    import optuna

    from bench.landscapes import build

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    checkpoint = None
    if checkpoints is not None:
        checkpoints.mkdir(parents=True, exist_ok=True)
        checkpoint = checkpoints / f"{landscape}-{scale}x-{sampler}-seed{seed}-{trials}.log"
    return run(build(landscape, scale, seed), sampler, seed, trials, checkpoint)


def _append(records: Iterable[dict], out: Path) -> None:
    for record in records:
        with out.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(f"{record['landscape']:<12}{record['scale']}x {record['sampler']:<18} seed "
              f"{record['seed']}: {record['regret']}  {record['ms_per_trial']:.0f} ms/trial",
              file=sys.stderr, flush=True)  # fmt: skip

if __name__ == "__main__":
    main()
