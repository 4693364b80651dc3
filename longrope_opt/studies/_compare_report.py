"""Read finished comparison studies: cost-aware best-so-far curves, the table, the plotly HTML.

Nothing here evaluates anything: it reads trials (values, states, the `evaluated_tokens` user
attr the objective writes, timestamps) from storage. Cost is counted in evaluated tokens, so a
pruned trial costs what it evaluated; "full evaluations" are tokens divided by the tokens of one
complete evaluation.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import optuna
from optuna.trial import TrialState

from longrope_opt.samplers import PLAIN_EVOLUTION
from longrope_opt.studies._compare import comparison_study_name


_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass
class SeedRun:
    """One study's trajectory within the budget (trials in number order)."""

    seed: int
    best: list[float] = field(default_factory=list)  # best-so-far after each finished trial
    tokens: list[int] = field(default_factory=list)  # cumulative evaluated tokens
    pruned: int = 0
    failed: int = 0
    seconds: float = 0.0
    full_tokens: int = 0  # tokens of the largest complete evaluation in the study
    seed_best: float = math.nan  # best enqueued PI/NTK/YaRN seed trial (user attr ``seed``)
    maximize: bool = False  # the study's direction: which way "best" and "reach" go

    @property
    def final_best(self) -> float:
        """The best value after the budget (NaN before any finished trial)."""
        return self.best[-1] if self.best else math.nan

    def cost_to_reach(self, target: float) -> tuple[int | None, int | None]:
        """(trials, tokens) until best-so-far reaches `target` (≤, or ≥ when maximizing);
        (None, None) if never."""
        for i, value in enumerate(self.best):
            if (value >= target) if self.maximize else (value <= target):
                return i + 1, self.tokens[i]
        return None, None


@dataclass
class SamplerSummary:
    """One sampler over its seeds."""

    sampler: str
    runs: list[SeedRun]

    def bests(self) -> list[float]:
        """Each seed's final best (finite ones only)."""
        return [r.final_best for r in self.runs if math.isfinite(r.final_best)]


def read_run(study: optuna.Study, seed: int, budget: int) -> SeedRun:
    """The first `budget` finished trials of `study` as a `SeedRun`."""
    run = SeedRun(seed=seed, maximize=study.direction == optuna.study.StudyDirection.MAXIMIZE)
    better = max if run.maximize else min
    best, spent = math.nan, 0
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    run.full_tokens = max(
        (int(t.user_attrs.get("evaluated_tokens", 0)) for t in trials
         if t.state == TrialState.COMPLETE),
        default=0,
    )  # fmt: skip
    for t in trials:
        if len(run.best) >= budget:
            break
        if t.state == TrialState.FAIL:
            run.failed += 1
            spent += int(t.user_attrs.get("evaluated_tokens", 0))
            continue
        if t.state not in _FINISHED:
            continue
        spent += int(t.user_attrs.get("evaluated_tokens", 0))
        if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value):
            best = t.value if math.isnan(best) else better(best, t.value)
            if t.user_attrs.get("seed"):
                so_far = run.seed_best
                run.seed_best = t.value if math.isnan(so_far) else better(so_far, t.value)
        run.pruned += t.state == TrialState.PRUNED
        if t.datetime_start and t.datetime_complete:
            run.seconds += (t.datetime_complete - t.datetime_start).total_seconds()
        run.best.append(best)
        run.tokens.append(spent)
    return run


def read_comparison(
    storage: Any, prefix: str, samplers: list[str], seeds: list[int], budget: int
) -> tuple[list[SamplerSummary], list[str]]:
    """Summaries of the studies that exist, and the names of those that do not."""
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    summaries, missing = [], []
    for name in samplers:
        runs = []
        for seed in seeds:
            study_name = comparison_study_name(prefix, name, seed)
            if study_name not in existing:
                missing.append(study_name)
                continue
            study = optuna.load_study(study_name=study_name, storage=storage)
            runs.append(read_run(study, seed, budget))
        summaries.append(SamplerSummary(name, runs))
    return summaries, missing


def full_eval_tokens(summaries: list[SamplerSummary]) -> int:
    """Tokens of one complete evaluation (the largest any complete trial used)."""
    return max((run.full_tokens for s in summaries for run in s.runs), default=0)


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "—"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} ± {sd:.4f}"


def format_table(summaries: list[SamplerSummary], full_tokens: int, budget: int) -> str:
    """The comparison table: best, gain over the enqueued seeds, cost to reach the reference
    sampler's best (the plain evolution if compared, else the first sampler), pruning, time."""
    ref = next((s for s in summaries if s.sampler == PLAIN_EVOLUTION and s.bests()), None)
    ref = ref or next((s for s in summaries if s.bests()), None)
    target = statistics.fmean(ref.bests()) if ref else None
    w = max([12, *(len(s.sampler) for s in summaries)])
    lines = []
    if ref is not None and target is not None:
        lines.append(
            f"target = mean best of {ref.sampler} at {budget} trials: {target:.4f}; "
            "cost to reach it in full evaluations (tokens / tokens of one complete evaluation),"
            " mean over seeds; '>=' counts a seed that never reached it as its whole budget;"
            " 'vs seeds' = best / best enqueued seed trial - 1, mean over seeds."
        )
    head = (
        f"{'sampler':<{w}} {'best (mean ± sd)':>18} {'vs seeds':>9} {'reached':>8}"
        f" {'full evals':>11} {'trials':>7}"
    )
    head += f" {'pruned':>7} {'full evals':>11} {'wall s':>7}"
    lines += [
        f"{'':<{w}} {'':>18} {'':>9} {'target':>8} {'to target':>11} {'to tgt':>7}"
        f" {'':>7} {'used':>11} {'':>7}",
        head,
    ]
    for s in summaries:
        if not s.runs:
            lines.append(f"{s.sampler:<{w}} (no study)")
            continue
        reached, evals, trials, censored = 0, [], [], False
        for run in s.runs:
            n, tokens = run.cost_to_reach(target) if target is not None else (None, None)
            if n is None or tokens is None:
                censored = True
                n, tokens = len(run.best), run.tokens[-1] if run.tokens else 0
            else:
                reached += 1
            evals.append(tokens / full_tokens if full_tokens else math.nan)
            trials.append(n)
        ge = ">=" if censored else ""
        used = statistics.fmean(
            (r.tokens[-1] if r.tokens else 0) / full_tokens if full_tokens else math.nan
            for r in s.runs
        )
        gains = [100 * (r.final_best / r.seed_best - 1) for r in s.runs
                 if math.isfinite(r.seed_best) and math.isfinite(r.final_best)]  # fmt: skip
        vs_seeds = f"{statistics.fmean(gains):+.2f}%" if gains else "—"
        to_target = f"{ge}{statistics.fmean(evals):.1f}" if target is not None else "—"
        to_trials = f"{ge}{statistics.fmean(trials):.1f}" if target is not None else "—"
        lines.append(
            f"{s.sampler:<{w}} {_mean_sd(s.bests()):>18} {vs_seeds:>9}"
            f" {f'{reached}/{len(s.runs)}':>8} {to_target:>11} {to_trials:>7}"
            f" {statistics.fmean(r.pruned for r in s.runs):>7.1f} {used:>11.1f}"
            f" {statistics.fmean(r.seconds for r in s.runs):>7.0f}"
        )
    return "\n".join(lines)


def write_html(
    summaries: list[SamplerSummary], path: str, *, title: str, full_tokens: int
) -> None:
    """Best-so-far perplexity against cost (full evaluations), one line per (sampler, seed)."""
    # the optional extra `plotly` (the comparison's figure)
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    fig = go.Figure()
    palette = qualitative.Plotly + qualitative.Dark24
    for i, summary in enumerate(summaries):
        for j, run in enumerate(summary.runs):
            fig.add_trace(
                go.Scatter(
                    x=[t / full_tokens for t in run.tokens] if full_tokens else run.tokens,
                    y=run.best,
                    mode="lines",
                    line={"shape": "hv", "color": palette[i % len(palette)]},
                    name=summary.sampler,
                    legendgroup=summary.sampler,
                    showlegend=j == 0,
                    hovertemplate=f"{summary.sampler} seed {run.seed}<br>%{{x:.1f}} evals"
                    "<br>best %{y:.4f}<extra></extra>",
                )
            )
    fig.update_layout(
        title=title,
        xaxis_title="cost: full evaluations (evaluated tokens / tokens of one evaluation)",
        yaxis_title="best perplexity so far",
        yaxis_type="log",
        template="plotly_white",
    )
    # Self-contained: the plot must open on an offline machine.
    fig.write_html(path, include_plotlyjs=True)
