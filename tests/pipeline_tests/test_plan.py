"""The plan `extend` sizes to a budget: budgets parsed, stages fitted, the least plan when short,
nothing in a budget shorter than one forward."""

from __future__ import annotations

import pytest

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.pipeline import Plan
from longrope_opt.pipeline import format_seconds
from longrope_opt.pipeline import make_plan
from longrope_opt.pipeline import parse_budget


COMMON = {"seeds": 3, "samples": 3, "retrieval_keys": 4}


@pytest.mark.parametrize(("text", "seconds"), [("20m", 1200), ("2h", 7200), ("1h30m", 5400),
                                               ("90s", 90), ("90", 90), (45.5, 45.5)])  # fmt: skip
def test_budgets_parse(text, seconds) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0", "-1", "5x", "h"])
def test_a_bad_budget_names_the_argument(text) -> None:
    with pytest.raises(InvalidArgumentError, match="`budget`"):
        parse_budget(text)


def test_a_plan_fits_its_budget_and_grows_with_it() -> None:
    plans = [make_plan(60.0, budget=b, **COMMON) for b in (1200, 3600, 4 * 3600, 24 * 3600)]
    for plan, budget in zip(plans, (1200, 3600, 4 * 3600, 24 * 3600)):
        assert plan.seconds <= budget * 1.02  # what the plan expects fits what it was given
        assert plan.trials >= 1
    assert [p.trials for p in plans] == sorted(p.trials for p in plans)
    assert plans[-1].trials > plans[0].trials
    assert plans[-1].validation_keys >= plans[0].validation_keys
    assert set(plans[-1].classic) == {"yarn", "yarn-cd", "ntk", "ntk-cd"}  # every contender
    assert plans[0].budget == 1200


def test_a_budget_shorter_than_one_forward_is_refused_with_what_the_least_plan_takes() -> None:
    with pytest.raises(InvalidArgumentError, match="shorter than one forward") as info:
        make_plan(60.0, budget=59, **COMMON)
    least = make_plan(60.0, budget=60, **COMMON)
    assert format_seconds(least.seconds) in str(info.value)  # the least plan, in its own words


def test_a_budget_too_small_for_one_trial_gets_the_least_plan_which_says_it_runs_over() -> None:
    # 3 documents of 60 s do not fit in 170 s: the first seed and a perplexity-only check run
    plan = make_plan(60.0, budget=170, **COMMON)
    assert plan.trials == 1 and plan.guard_keys == 0 and plan.validation_keys == 0
    least = make_plan(60.0, budget=60, **COMMON)  # nothing less exists
    assert plan.forwards() == least.forwards() and plan.seconds == least.seconds
    text = plan.describe(16384)
    assert plan.seconds > 170 and "over the 3 min budget, the least that searches" in text


def test_a_plan_that_buys_only_seeds_and_overruns_its_budget_says_so() -> None:
    plan = make_plan(160.0, budget=20 * 60, **COMMON)  # a 16k forward on an AVX2 CPU
    text = plan.describe(16384)
    if plan.trials <= plan.seeds:
        assert f"of the {plan.seeds} seeds; no candidate" in text and "1 trials" not in text
    assert ("over the 20 min budget" in text) == (plan.seconds > plan.budget)


def test_trials_mode_and_the_stored_form() -> None:
    plan = make_plan(12.5, trials=12, **COMMON)
    assert plan.trials == 12 and plan.budget is None and plan.guard_keys == 6
    assert Plan.from_dict(plan.to_dict()) == plan
    text = plan.describe(16384)
    for word in ("search", "guard", "validate", "export", "12 trials (3 seeds, 9 candidates)",
                 "12.5 s"):
        assert word in text
    assert "over the" not in text  # no budget to be over
    with pytest.raises(InvalidArgumentError):
        make_plan(12.5, trials=12, budget=100, **COMMON)
    with pytest.raises(InvalidArgumentError, match="`trials`"):
        make_plan(12.5, trials=0, **COMMON)


def test_seconds_read_well() -> None:
    assert format_seconds(40) == "40 s"
    assert format_seconds(20 * 60) == "20 min"
    assert format_seconds(65 * 60) == "1 h 05 min"


def test_the_branched_form_buys_more_of_the_same_budget_and_is_stored_with_the_plan() -> None:
    single = make_plan(300.0, budget=6 * 3600, **COMMON)
    branched = make_plan(300.0, budget=6 * 3600, passkey_form="branched", length=65536, **COMMON)
    # a key's branch attends to the whole haystack: it costs more of a forward at 16k than at 64k
    assert 0 < branched.key_cost < make_plan(300.0, budget=6 * 3600, passkey_form="branched",
                                             length=16384, **COMMON).key_cost < 1  # fmt: skip
    assert branched.seconds <= 6 * 3600 * 1.02
    # a row's keys cost one forward together: more trials or more validation for the budget
    assert (branched.trials, branched.validation_keys, branched.held_out_docs) > (
        single.trials, single.validation_keys, single.held_out_docs)  # fmt: skip
    assert branched.forwards()["guard"] < single.forwards()["guard"] or not single.guard_keys
    assert Plan.from_dict(branched.to_dict()) == branched
    old = {k: v for k, v in single.to_dict().items() if k != "passkey_form"}
    assert Plan.from_dict(old).passkey_form == "single"  # a plan stored before the forms
    assert "branched form" in branched.describe(32768)


def test_a_resumed_plan_counts_what_is_left_and_is_stored_without_it() -> None:
    import dataclasses
    import datetime as dt

    plan = make_plan(300.0, trials=17, **COMMON)
    now = dt.datetime(2026, 1, 1, 12, 0)
    resumed = dataclasses.replace(plan, finished=6)
    assert 0 < resumed.done_forwards() < plan.forwards()["search"] and plan.done_forwards() == 0
    left = plan.seconds - resumed.done_forwards() * 300.0
    end = now + dt.timedelta(seconds=left)
    text = resumed.describe(32768, now=now)
    # what is left, not the whole plan again
    assert text.startswith("plan, resumed: what is left:")
    search = next(line for line in text.splitlines() if line.startswith("  search"))
    assert "11 of 17 trials" in search and "left (6 done)" in search
    left_fw = plan.forwards()["search"] - resumed.done_forwards()
    assert search.endswith(f"~{left_fw:.0f} forwards left")
    assert f"about {format_seconds(left)} left of {format_seconds(plan.seconds)}" in text
    fresh = plan.describe(32768, now=now)
    assert f"done around {end:%H:%M}" in text and "left" not in fresh and "resumed" not in fresh
    assert "finished" not in resumed.to_dict() and Plan.from_dict(resumed.to_dict()) == plan
    # a search and guard that are done are said to be done, and count as done
    past = dataclasses.replace(plan, finished=17, guard_done=True)
    lines = past.describe(32768, now=now).splitlines()
    assert lines[1] == "  search    done (17 of 17 trials)" and lines[2] == "  guard     done"
    assert past.done_forwards() == plan.forwards()["search"] + plan.forwards()["guard"]
    assert "guard_done" not in past.to_dict()
    # more trials than planned (a budget raised by hand): the search counts whole, never more
    assert dataclasses.replace(plan, finished=40).done_forwards() == plan.forwards()["search"]


def test_a_plan_resumed_on_another_machine_does_not_call_its_timing_this_machines() -> None:
    import dataclasses

    plan = dataclasses.replace(make_plan(300.0, trials=17, **COMMON), machine="CPU A")
    stored = plan.to_dict()
    assert stored["machine"] == "CPU A" and "here" not in stored
    same = dataclasses.replace(Plan.from_dict(stored), finished=3, here="CPU A")
    other = dataclasses.replace(Plan.from_dict(stored), finished=3, here="CPU B")
    assert "takes 300.0 s here" in same.describe(32768).splitlines()[0]
    head = other.describe(32768).splitlines()[0]
    assert " here" not in head and "took 300.0 s on CPU A" in head and "is CPU B" in head
    # a plan stored before machines were named reads as before
    old = Plan.from_dict({k: v for k, v in stored.items() if k != "machine"})
    assert "takes 300.0 s here" in dataclasses.replace(old, here="CPU B").describe(32768)
