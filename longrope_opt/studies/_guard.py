"""The retrieval guard: the winner a study exports must retrieve what its best seed retrieves.

A perplexity search can trade retrieval for perplexity: its best trial can read long text better
and still miss passkeys its own seed finds (it did at 4x on SmolLM2; the docs' results page).
`guard_study` checks the study's best candidates, best first
(re-ranked order when the study was re-ranked), on `keys` passkey prompts at the target length
and keeps the first that retrieves at least as many as the study's best seed; that trial is the
guarded winner (the seed itself when no candidate passes), and `best_scaling` and `export_best`
take it. Prompts use their own seed (`GUARD_SEED`), so they are never the prompts `validate`
reports on.

Every key's outcome is stored in the study as it is measured (the study record's guard entry), so an
interrupted guard resumes and a finished one costs nothing; a candidate is dropped as soon as it
has missed more keys than the seed, since it can no longer pass.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import optuna
import torch
from optuna.trial import FrozenTrial
from tqdm.auto import tqdm

from longrope_opt import record
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives import check_passkey_form
from longrope_opt.objectives import passkey_kind
from longrope_opt.objectives import passkey_prompts
from longrope_opt.objectives import passkey_results
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.studies._winner import guard_candidates
from longrope_opt.studies._winner import space_of_study


logger = logging.getLogger(__name__)

#: Seed of the guard's passkey prompts; `validate` reports on other prompts (its seed 0).
GUARD_SEED = 1


@dataclasses.dataclass(frozen=True)
class GuardResult:
    """What the guard decided.

    Attributes:
        winner: The guarded winner's trial number.
        reference: The study's best seed (the bar): its trial number.
        passed: Whether a searched candidate passed (False: the winner is the seed itself).
        retrieved: Keys retrieved, by trial number (of those measured).
        keys: Prompts per candidate.
    """

    winner: int
    reference: int
    passed: bool
    retrieved: dict[int, int]
    keys: int


def guard_study(
    study: optuna.Study,
    model: Any,
    tokenizer: Any,
    *,
    keys: int,
    length: int | None = None,
    top: int = 4,
    seed: int = GUARD_SEED,
    progress: bool = False,
    retrieves: Callable[[RopeScaling, list[Any]], Iterator[tuple[int, bool]]] | None = None,
    form: str = "single",
) -> GuardResult:
    """Choose and store the guarded winner of `study` (see the module docstring).

    Args:
        study: A study made by `run_search`, ideally re-ranked (`rerank_study`).
        model: The study's model, loaded.
        tokenizer: Its tokenizer.
        keys: Passkey prompts per candidate (>= 1).
        length: Prompt length (default: the study's target length).
        top: Candidates checked when the study was not re-ranked (its `top` best trials).
        seed: The prompts' seed (default `GUARD_SEED`, never `validate`'s prompts).
        progress: Progress bars.
        retrieves: ``(scaling, prompts) -> (index, retrieved)`` pairs, yielded one prompt at a
            time: how retrieval is checked. Default: the model's greedy answer to each
            passkey prompt (`longrope_opt.objectives.passkey_results`); another check (a
            needle task of your own, say) plugs in here.
        form: How the default check measures the prompts (`passkey_results`).

    Returns:
        A `GuardResult`; the decision is stored in the study record.

    Raises:
        InvalidArgumentError: Bad `keys`/`top`, or a study without a completed seed.
    """
    return guard_trials(
        study, lambda t: space_of_study(study, t).to_scaling(t.params), model, tokenizer,
        keys=keys, length=length, top=top, seed=seed, progress=progress, retrieves=retrieves,
        form=form,
    )  # fmt: skip


def guard_trials(
    study: optuna.Study,
    to_scaling: Callable[[FrozenTrial], RopeScaling],
    model: Any,
    tokenizer: Any,
    *,
    keys: int,
    length: int | None = None,
    top: int = 4,
    seed: int = GUARD_SEED,
    progress: bool = False,
    retrieves: Callable[[RopeScaling, list[Any]], Iterator[tuple[int, bool]]] | None = None,
    form: str = "single",
) -> GuardResult:
    """`guard_study` with the trials' converter given: a pipeline that settled the search space
    passes it, instead of every candidate rebuilding it from the study record."""
    for name, value in (("keys", keys), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"`{name}` must be an integer >= 1, got {value!r}.")
    # The bar and the candidates (best first) before the guard's own record.
    reference, candidates = guard_candidates(study, top)
    length = int(length or record.target_length(study) or 0)
    if length < 2:
        raise InvalidArgumentError(f"`length` must be given: study {study.study_name!r} records none.")
    check_passkey_form(form)
    stored = record.read_guard(study)
    setup = {"keys": keys, "seed": seed, "length": length, "form": form,
             "kind": passkey_kind(form)}  # fmt: skip
    # a record made before the forms existed was made in the single form
    before = {"form": "single", "kind": "passkey"}
    if {k: stored.get(k, before.get(k)) for k in setup} != setup:
        stored = {**setup, "results": {}}
    results: dict[str, dict[str, bool]] = {k: dict(v) for k, v in stored["results"].items()}
    prompts = passkey_prompts(tokenizer, length, n_trials=keys, seed=seed)

    def greedy(scaling: RopeScaling, chosen: list[Any]) -> Iterator[tuple[int, bool]]:
        with torch.inference_mode(), apply_rope_scaling(model, scaling):
            for j, correct, _ in passkey_results(model, chosen, form=form):
                yield j, correct

    check = retrieves or greedy

    def measure(trial: FrozenTrial, allowed_misses: int) -> dict[str, bool]:
        got = results.setdefault(str(trial.number), {})
        todo = [i for i in range(keys) if str(i) not in got]
        if not todo or list(got.values()).count(False) > allowed_misses:
            return got
        scaling = to_scaling(trial)
        bar = _bar(progress, keys, len(got), f"guard trial {trial.number}")
        answers = check(scaling, [prompts[i] for i in todo])
        for j, correct in answers:
            got[str(todo[j])] = bool(correct)
            record.write_guard(study, {**stored, "results": results})
            bar.update(1)
            if list(got.values()).count(False) > allowed_misses:
                break  # can no longer pass
        close = getattr(answers, "close", None)
        if close is not None:
            close()  # a generator stopped early: leave its patch now
        bar.close()
        return got

    bar_misses = list(measure(reference, keys).values()).count(False)
    logger.info("guard %s: seed %s (trial %d) retrieves %d/%d", study.study_name,
                reference.user_attrs["seed"], reference.number, keys - bar_misses, keys)  # fmt: skip
    winner, passed = reference, False
    for trial in candidates:
        got = measure(trial, bar_misses)
        ok = len(got) == keys and list(got.values()).count(False) <= bar_misses
        logger.info("guard %s: trial %d retrieves %d/%d: %s", study.study_name, trial.number,
                    sum(got.values()), len(got), "passes" if ok else "fails")  # fmt: skip
        if ok:
            winner, passed = trial, True
            break
    stored.update(results=results, reference=reference.number, winner=winner.number)
    record.write_guard(study, stored)
    return GuardResult(
        winner=winner.number,
        reference=reference.number,
        passed=passed,
        retrieved={int(n): sum(v.values()) for n, v in results.items()},
        keys=keys,
    )


def _bar(show: bool, total: int, initial: int, desc: str) -> Any:

    return tqdm(total=total, initial=initial, desc=desc, unit="key", disable=not show, leave=False)
