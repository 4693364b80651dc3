"""What `extend` will do, sized to a budget from one timed forward at the target length.

Every stage's cost is counted in forwards at the target length (a passkey prompt sharing its
beginning with the others costs about 0.6 of one; in the branched form a row's keys cost one
forward together, `longrope_opt.objectives.passkey_results`);
one timed forward turns forwards into seconds on this machine. A wall-time budget is shared
out: about 55 % to the search, 10 % to the retrieval guard, 35 % to the validation, each stage
taking the largest setting of its ladder that fits (the guard at least 4 passkeys once the
budget holds `GUARDED` forwards), and the search's trials what is left. A
plan is stored in the study, so a rerun continues the same plan instead of timing again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from typing import Any

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import LEAD_IN


#: A passkey prompt's cost in forwards when the prompts share their beginning.
PASSKEY_COST = 0.6
#: The least a branched key costs beyond its row's one forward over the haystack, in forwards.
#: Its lead-in's 2,048 queries attend to the whole haystack through a masked attention that runs
#: well below the causal forward's kernel, so its share of a forward stops falling with the
#: length: measured 0.124 at 16k (AMD Zen 4, bench/results/passkey-branched.txt), 0.109 at 32k
#: and 0.084 at 64k (Intel Xeon with AMX: a 20-key row took 227-239 s beside a 78 s forward; a
#: 4-key row 343 s beside a 257 s one), where lead-in / length says 0.125, 0.063 and 0.031.
BRANCH_FLOOR = 0.1


def branch_cost(length: int) -> float:
    """Forwards one branched key costs at `length`: lead-in / length, at least `BRANCH_FLOOR`
    (and at most one forward)."""
    return min(1.0, max(LEAD_IN / max(length, 1), BRANCH_FLOOR))


#: Expected documents read by a candidate that does not enter the population (the population
#: pruner stops most after the first document). bench/results/fitness-cost.txt counts the 16k
#: search of 12 trials: 1.0 (5 of 5 pruned after one document).
PRUNED_DOCS = 1.5
#: Share of the candidates that enter the population (they read every document and pay the
#: retrieval constraint's passkeys): 0.44 in a 16k search (4 of 9, bench/results/fitness-cost.txt)
#: and 0.64 in the 32k one (9 of 14, experiments/results/extend-4x-cpu.db: the model-guided
#: candidates are good enough to enter), 13 of 23 together. With it and `PRUNED_DOCS` the 32k
#: search's 17 trials come to 62 forwards where they read 43 documents and 10 rows of 4 passkeys
#: (about 63).
ENTERING = 0.55
#: The classic rows that can be the best past the trained length.
CONTENDERS = ("yarn", "yarn-cd", "ntk", "ntk-cd")
#: Validation settings, smallest first: (held-out documents, passkeys, classic rows).
VALIDATION_LADDER = (
    (2, 0, ("yarn-cd",)),
    (2, 4, ("yarn-cd",)),
    (3, 6, ("yarn-cd",)),
    (3, 10, ("yarn-cd",)),
    (3, 10, CONTENDERS),
    (5, 20, CONTENDERS),
)
#: Guard passkeys, smallest first.
GUARD_LADDER = (0, 4, 6, 10)
SHARES = {"search": 0.55, "guard": 0.10, "validate": 0.35}
#: From this many forwards on, the guard runs whatever its share (the smallest rung).
GUARDED = 20


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much of each stage `extend` runs.

    Attributes:
        seconds_per_forward: One forward at the target length on this machine (measured).
        trials: The search's trials (seeds included).
        seeds: How many of them are seeds (each reads every document).
        samples: Documents of the fitness.
        retrieval_keys: Passkeys of the retrieval constraint.
        guard_keys: Passkeys of the retrieval guard (0: none).
        held_out_docs: Held-out documents of the validation.
        validation_keys: Passkeys of the validation (0: perplexity only).
        classic: Classic rows the validation measures.
        budget: The wall-time budget it was sized to (None: sized by `trials`).
        passkey_form: How passkeys are measured (a plan stored before the forms: single).
        key_cost: A branched key's cost in forwards at this plan's length (`branch_cost`).
        machine: The CPU or GPU `seconds_per_forward` was measured on (None: a plan stored
            before machines were named).
        finished: Search trials a resumed study already holds (not stored: read on resume), so
            the time left and the progress start where the study is.
        guard_done: Whether a resumed study's guard has chosen its winner (not stored).
        here: The machine a resumed plan runs on now (not stored): where it is not `machine`,
            the times are the other machine's, and the plan says so rather than "here".
    """

    seconds_per_forward: float
    trials: int
    seeds: int
    samples: int
    retrieval_keys: int
    guard_keys: int
    held_out_docs: int
    validation_keys: int
    classic: tuple[str, ...]
    budget: float | None = None
    passkey_form: str = "single"
    key_cost: float = 0.0
    machine: str | None = None
    finished: int = dataclasses.field(default=0, compare=False)
    guard_done: bool = dataclasses.field(default=False, compare=False)
    here: str | None = dataclasses.field(default=None, compare=False)

    def forwards(self) -> dict[str, float]:
        """Expected forwards per stage (`search`, `guard`, `validate`)."""
        form = (self.passkey_form, self.key_cost)
        return {
            "search": search_forwards(self.trials, self.seeds, self.samples, self.retrieval_keys,
                                      form),  # fmt: skip
            "guard": guard_forwards(self.guard_keys, form),
            "validate": validation_forwards(
                self.held_out_docs, self.validation_keys, len(self.classic), form=form
            ),
        }

    @property
    def seconds(self) -> float:
        """Expected wall time of the whole plan."""
        return sum(self.forwards().values()) * self.seconds_per_forward

    def done_by_stage(self) -> dict[str, float]:
        """Forwards already done per stage: the `finished` trials' share of the search's, the
        guard's when it is done (the validation is counted whole: a resumed run measures only
        what its store lacks, and says so as it goes)."""
        fw = self.forwards()
        return {"search": fw["search"] * min(self.finished, self.trials) / self.trials,
                "guard": fw["guard"] if self.guard_done else 0.0, "validate": 0.0}  # fmt: skip

    def done_forwards(self) -> float:
        """Forwards already done (`done_by_stage`, summed)."""
        return sum(self.done_by_stage().values())

    @property
    def resumed(self) -> bool:
        """Whether a stored study has done part of this plan."""
        return self.finished > 0 or self.guard_done

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the study record keeps it)."""
        out = dataclasses.asdict(self)
        out["classic"] = list(self.classic)
        # properties of the study and of this process now, not of the plan
        del out["finished"], out["guard_done"], out["here"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Inverse of `to_dict`."""
        return cls(**{**data, "classic": tuple(data["classic"])})

    def describe(self, length: int, *, now: Any = None) -> str:
        """The plan in a few lines, with the estimated end time (from `now`, a
        ``datetime.datetime``; default: this moment; a resumed plan counts what is left)."""
        now = now or dt.datetime.now()
        fw = self.forwards()
        left = self.seconds - self.done_forwards() * self.seconds_per_forward
        end = now + dt.timedelta(seconds=left)
        val = (f"{self.held_out_docs} held-out documents against {', '.join(self.classic)}, "
               + (f"{self.validation_keys} passkeys" if self.validation_keys else "no passkeys "
                  "(perplexity only)"))  # fmt: skip
        done = self.done_by_stage()
        guard = f"{self.guard_keys} passkeys" if self.guard_keys else "none"
        if self.trials > self.seeds:
            search = f"{self.trials} trials ({self.seeds} seeds, {self.trials - self.seeds} candidates)"
        else:  # a budget that buys the seeds only: say which part of the search runs
            search = (f"{self.trials} trial{'s' if self.trials != 1 else ''} (of the "
                      f"{self.seeds} seeds; no candidate)")  # fmt: skip
        search += (f" on {self.samples} documents, retrieval constraint {self.retrieval_keys} "
                   "passkeys")  # fmt: skip
        finished = min(self.finished, self.trials)
        if finished == self.trials:  # a resumed study: what is done is said, not planned again
            search = f"done ({self.trials} of {self.trials} trials)"
        elif finished:
            search = f"{self.trials - finished} of {search}, left ({finished} done)"
        if self.guard_done:
            guard = "done"
        over = (f": over the {format_seconds(self.budget)} budget, the least that searches and "
                "validates" if self.budget and self.seconds > self.budget else "")  # fmt: skip

        def cost(stage: str) -> str:
            left_fw = fw[stage] - done[stage]
            return f"   ~{left_fw:.0f} forwards" + (" left" if done[stage] and left_fw else "")

        total = (f"  about {format_seconds(left)} left of {format_seconds(self.seconds)}"
                 if self.resumed else f"  about {format_seconds(self.seconds)}{over}")  # fmt: skip
        head = "plan, resumed: what is left" if self.resumed else "plan"
        if self.machine and self.here and self.here != self.machine:
            # a study resumed on another machine: its timing is not this one's (one CPU can be
            # ten times another at a long length); the progress bar's estimate follows this
            # machine's own forwards
            timed = (f"took {self.seconds_per_forward:.1f} s on {self.machine}, where the "
                     f"study began (this machine is {self.here}: the times below are the "
                     "other's; the progress bar's are this one's)")  # fmt: skip
        else:
            timed = f"takes {self.seconds_per_forward:.1f} s here"
        return "\n".join([
            f"{head}: one {length}-token forward {timed}"
            + (f"; budget {format_seconds(self.budget)}" if self.budget else ""),
            f"  search    {search}" + ("" if finished == self.trials else cost("search"))
            + (f"\n  passkeys  {self.passkey_form} form" if self.passkey_form != "single" else ""),
            f"  guard     {guard}" + ("" if self.guard_done else cost("guard")),
            f"  validate  {val}{cost('validate')}",
            "  export    model directory, factors, tables, report",
            total + f"; done around {end:%H:%M} ({end:%Y-%m-%d})",
        ])  # fmt: skip


#: How passkeys are measured, for their cost: the form and a branched key's cost in forwards.
Form = tuple[str, float]
SINGLE: Form = ("single", 0.0)


def passkey_forwards(keys: int, form: Form = SINGLE) -> float:
    """Forwards one row's `keys` passkeys cost: `PASSKEY_COST` a key in the single form; one
    haystack forward and `branch_cost` a key in the branched one."""
    if not keys:
        return 0.0
    return keys * PASSKEY_COST if form[0] == "single" else 1.0 + keys * form[1]


def search_forwards(trials: int, seeds: int, samples: int, keys: int, form: Form = SINGLE) -> float:
    """Expected forwards of a search: seeds read every document, candidates mostly stop early
    (`PRUNED_DOCS`), the entering ones read all and pay the constraint's passkeys."""
    candidates = max(trials - seeds, 0)
    fitness = min(seeds, trials) * samples + candidates * (
        ENTERING * samples + (1 - ENTERING) * min(PRUNED_DOCS, samples)
    )
    retrieval = (ENTERING * candidates + 1) * passkey_forwards(keys, form) if candidates else 0.0
    return fitness + retrieval


def guard_forwards(keys: int, form: Form = SINGLE) -> float:
    """The guard measures the best seed and, typically, the best candidate (which the retrieval
    constraint has already kept to what the seed retrieves)."""
    return 2 * passkey_forwards(keys, form)


def validation_forwards(
    docs: int, keys: int, classic: int, candidates: int = 2, form: Form = SINGLE
) -> float:
    """Every row on every held-out document, and every row's passkeys."""
    rows = classic + candidates
    return rows * docs + rows * passkey_forwards(keys, form)


def make_plan(
    seconds_per_forward: float,
    *,
    budget: float | None = None,
    trials: int | None = None,
    seeds: int,
    samples: int,
    retrieval_keys: int,
    passkey_form: str = "single",
    length: int | None = None,
) -> Plan:
    """Size every stage to `budget` seconds, or run `trials` trials with the default settings.

    `passkey_form` is how the stages measure passkeys, at `length` tokens (what they cost; the
    branched form needs `length`).

    Raises:
        InvalidArgumentError: Neither or both of `budget` and `trials`, or a budget shorter
            than one forward (a longer one too small for the least plan gets that plan, which
            says it runs over).
    """
    if (budget is None) == (trials is None):
        raise InvalidArgumentError("give one of `budget` (seconds) and `trials`.")
    if not (math.isfinite(seconds_per_forward) and seconds_per_forward > 0):
        raise InvalidArgumentError(f"`seconds_per_forward` must be > 0, got {seconds_per_forward}.")
    common: dict[str, Any] = {"seconds_per_forward": seconds_per_forward, "seeds": seeds,
                              "samples": samples, "retrieval_keys": retrieval_keys,
                              "passkey_form": passkey_form,
                              "key_cost": branch_cost(length or 1) if passkey_form != "single" else 0.0}  # fmt: skip
    form = (passkey_form, common["key_cost"])
    if trials is not None:
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise InvalidArgumentError(f"`trials` must be an integer >= 1, got {trials!r}.")
        docs, keys, classic = VALIDATION_LADDER[3]
        return Plan(trials=trials, guard_keys=6, held_out_docs=docs, validation_keys=keys,
                    classic=classic, **common)  # fmt: skip
    assert budget is not None
    available = budget / seconds_per_forward
    # A budget that buys less than the least plan (the first seed on every document, a
    # perplexity-only check) gets that plan, which says it runs over: refusing would leave the
    # user to guess the budget that fits, and everything resumes. Only a budget shorter than one
    # forward, in which nothing at all runs, is refused.
    if available < 1:
        least = make_plan(seconds_per_forward, budget=seconds_per_forward, seeds=seeds,
                          samples=samples, retrieval_keys=retrieval_keys,
                          passkey_form=passkey_form, length=length)  # fmt: skip
        raise InvalidArgumentError(
            f"`budget` {format_seconds(budget)} is shorter than one forward "
            f"({seconds_per_forward:.0f} s here): the least that searches and validates takes "
            f"about {format_seconds(least.seconds)}."
        )
    docs, keys, classic = _largest(
        VALIDATION_LADDER, lambda s: validation_forwards(s[0], s[1], len(s[2]), form=form),
        available * SHARES["validate"],
    )  # fmt: skip
    guard = _largest(GUARD_LADDER, lambda k: guard_forwards(k, form),
                     available * SHARES["guard"])  # fmt: skip
    if available >= GUARDED:  # a plan that can afford a candidate ships a guarded one
        guard = max(guard, GUARD_LADDER[1])
    left = (available - validation_forwards(docs, keys, len(classic), form=form)
            - guard_forwards(guard, form))  # fmt: skip
    n = 1
    while search_forwards(n + 1, seeds, samples, retrieval_keys, form) <= left:
        n += 1
    return Plan(trials=n, guard_keys=guard, held_out_docs=docs, validation_keys=keys,
                classic=classic, budget=budget, **common)  # fmt: skip


def _largest(ladder: Any, cost: Any, room: float) -> Any:
    fitting = [step for step in ladder if cost(step) <= room]
    return fitting[-1] if fitting else ladder[0]


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_budget(text: str | float | int) -> float:
    """Seconds from ``"2h"``, ``"20m"``, ``"90s"``, ``"1h30m"`` or a number of seconds.

    Raises:
        InvalidArgumentError: Anything else, or a budget <= 0.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*",
                             str(text))  # fmt: skip
        if parts is None or not any(parts.groups()):
            raise InvalidArgumentError(
                f"`budget` must be a duration like 2h, 20m, 1h30m or 900s, got {text!r}."
            )
        h, m, s = (float(g) if g else 0.0 for g in parts.groups())
        seconds = h * 3600 + m * 60 + s
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(f"`budget` must be > 0, got {text!r}.")
    return seconds


def format_seconds(seconds: float | None) -> str:
    """``"1 h 05 min"``, ``"12 min"``, ``"40 s"``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
