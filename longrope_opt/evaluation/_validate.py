"""`validate`: measure every row of a validation table, each measurement stored as it is made.

Perplexity of each document at each length, then passkey prompts, for the classic rows and the
candidates. What the store already holds is not measured again (`MeasurementStore`); the rest is
measured perplexity first (the cheaper numbers come first), then passkeys one row at a time
(their prompts share one forward over their common beginning on the CPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation._rows import CLASSIC
from longrope_opt.evaluation._rows import Row
from longrope_opt.evaluation._rows import check_names
from longrope_opt.evaluation._rows import classic_rows
from longrope_opt.evaluation._store import MeasurementStore
from longrope_opt.evaluation._store import eager_path
from longrope_opt.evaluation._store import measurement_key
from longrope_opt.evaluation._store import model_fingerprint
from longrope_opt.evaluation._store import tokens_hash
from longrope_opt.objectives import check_form_runs
from longrope_opt.objectives import check_passkey_form
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.objectives import passkey_kind
from longrope_opt.objectives import passkey_prompts
from longrope_opt.objectives import passkey_results
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeSpec


logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Validation:
    """Every number of a validation table, as measured (statistics: `summarize`).

    Attributes:
        lengths: Tokens per document window and per passkey prompt.
        documents: Document ids (each length uses the first `length` tokens of each).
        keys: Passkey prompts per length.
        passkey_seed: Seed of the prompts (`longrope_opt.objectives.passkey_prompts`).
        rows: Row names in table order (classic rows first).
        classic: Names of the classic rows.
        sources: Where each candidate came from.
        ppl: ``{length: {row: [perplexity per document]}}``.
        passkey: ``{length: {row: [retrieved per prompt]}}``.
        depths: ``{length: [requested depth per prompt]}``.
        paths: ``{length: {row: sorted compute paths its numbers came from}}``.
        path: This process's compute path.
        model: The model's fingerprint (`model_fingerprint`).
        measured: Forwards run by this call (0 on a rerun with nothing new).
        in_sample: Each study candidate's in-sample ratios (`Row.in_sample`), by row.
        passkey_form: How the passkeys were measured (`longrope_opt.objectives.passkey_results`;
            a table read back from before the forms existed: ``"single"``).
    """

    lengths: list[int]
    documents: list[str]
    keys: int
    passkey_seed: int
    rows: list[str]
    classic: list[str]
    sources: dict[str, str]
    ppl: dict[int, dict[str, list[float]]]
    passkey: dict[int, dict[str, list[bool]]]
    depths: dict[int, list[float]]
    paths: dict[int, dict[str, list[str]]]
    path: str
    model: str
    measured: int = 0
    in_sample: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    passkey_form: str = "single"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lengths as strings where they are keys)."""
        out = dataclasses.asdict(self)
        for name in ("ppl", "passkey", "depths", "paths"):
            out[name] = {str(k): v for k, v in out[name].items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Validation:
        """Inverse of `to_dict` (a table's every number, read back to judge it again)."""
        fields = dict(data)
        for name in ("ppl", "passkey", "depths", "paths"):
            fields[name] = {int(k): v for k, v in fields[name].items()}
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in fields.items() if k in known})


def _bar(show: bool, total: float) -> Any:

    # Cost in "forward-equivalents" of the longest length: a 32k forward is ~3x a 16k one.
    return tqdm(total=total, desc="validate", unit="fwd", disable=not show,
                bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} fwd [{elapsed}<{remaining}]")  # fmt: skip


def validate(
    model: Any,
    tokenizer: Any,
    candidates: Sequence[Row],
    documents: Sequence[Any],
    *,
    lengths: Sequence[int],
    store: MeasurementStore,
    keys: int = 20,
    passkey_seed: int = 0,
    doc_ids: Sequence[str] | None = None,
    classic: bool | Sequence[str] = True,
    progress: bool = True,
    passkey_form: str = "single",
) -> Validation:
    """Measure the classic rows and `candidates` on `documents` and passkey prompts.

    Args:
        model: A loaded RoPE causal LM (its compute path is recorded with every number).
        tokenizer: Its tokenizer (passkey prompts).
        candidates: Rows to judge (`study_rows`, `factor_rows`).
        documents: 1-D token tensors with at least ``max(lengths)`` tokens each (`load_samples`
            at the longest length); each length reads the first `length` tokens.
        lengths: Window and prompt lengths.
        store: Where measurements are kept and found (`MeasurementStore`).
        keys: Passkey prompts per length (0: none).
        passkey_seed: The prompts' seed (`passkey_prompts`); the retrieval guard uses another.
        doc_ids: Names of `documents` (default ``documents.doc_ids``).
        classic: Include the classic rows (none, PI, NTK, YaRN, YaRN-cd, NTK-cd), or only
            those named (the rows that can be the best at a length: each costs a forward per
            document and length).
        progress: A progress bar with an ETA over the forwards still to run.
        passkey_form: How the passkeys are measured (`longrope_opt.objectives.passkey_results`):
            ``"single"``, the paper's prompt, ≈ 0.6 of a forward per key on the CPU;
            ``"branched"``, one forward per row for all its keys (CPU only). Each form's
            outcomes are stored apart.

    Returns:
        A `Validation`.

    Raises:
        InvalidArgumentError: Bad lengths, keys, or too-short documents; the branched form
            where it cannot run (`longrope_opt.patching.can_share_prefix`), before any forward.
    """


    lengths = sorted({int(n) for n in lengths})
    if not lengths or lengths[0] < 2:
        raise InvalidArgumentError(f"`lengths` must be integers >= 2, got {list(lengths)}.")
    if isinstance(keys, bool) or not isinstance(keys, int) or keys < 0:
        raise InvalidArgumentError(f"`keys` must be an integer >= 0, got {keys!r}.")
    short = [i for i, d in enumerate(documents) if d.numel() < lengths[-1]]
    if short:
        raise InvalidArgumentError(
            f"`documents` must have >= {lengths[-1]} tokens each; document {short[0]} has "
            f"{documents[short[0]].numel()}."
        )
    check_names(candidates)
    check_passkey_form(passkey_form)
    kind = passkey_kind(passkey_form)
    wanted = list(CLASSIC) if classic is True else [] if classic is False else list(classic)
    unknown = [c for c in wanted if c not in CLASSIC]
    if unknown:
        raise InvalidArgumentError(f"`classic` rows must be among {list(CLASSIC)}, got {unknown[0]!r}.")
    ids = list(doc_ids if doc_ids is not None else getattr(documents, "doc_ids", []))
    ids = ids or [f"doc{i}" for i in range(len(documents))]
    spec = RopeSpec.from_config(model.config)
    fingerprint = model_fingerprint(model)
    table: dict[int, list[Row]] = {
        n: [*_classic(spec, n, wanted), *candidates] for n in lengths
    }
    prompts = {n: passkey_prompts(tokenizer, n, n_trials=keys, seed=passkey_seed) if keys else []
               for n in lengths}  # fmt: skip
    doc_hashes = {(n, i): tokens_hash(d[:n]) for n in lengths for i, d in enumerate(documents)}
    prompt_hashes = {(n, j): tokens_hash(p.ids) for n in lengths for j, p in enumerate(prompts[n])}

    def store_keys(exact: bool) -> tuple[dict, dict]:
        ppl = {(n, r.name, i): measurement_key("ppl", fingerprint, h, n, r.scaling, exact=exact)
               for (n, i), h in doc_hashes.items() for r in table[n]}  # fmt: skip
        passkey = {(n, r.name, j): measurement_key(kind, fingerprint, h, n, r.scaling, exact=exact)
                   for (n, j), h in prompt_hashes.items() for r in table[n]}  # fmt: skip
        return ppl, passkey

    ppl_keys, key_keys = store_keys(exact=False)
    # Records an earlier version keyed by the scaling's raw bits, adopted under today's keys.
    old_ppl, old_keys = store_keys(exact=True)
    adopted = sum(store.adopt(ppl_keys[k], old_ppl[k]) for k in ppl_keys)
    adopted += sum(store.adopt(key_keys[k], old_keys[k]) for k in key_keys)
    if adopted:
        logger.info("validate: %d records of an earlier key format adopted", adopted)
    stale = sum(store.stale(key) for key in {*ppl_keys.values(), *key_keys.values()})
    if stale:
        logger.warning("validate: %d records of another measuring version (or imported from a "
                       "table) are measured again", stale)  # fmt: skip
    cost = {n: (n / lengths[-1]) ** 1.5 for n in lengths}  # between linear and quadratic
    # One forward per distinct measurement: a candidate that is a classic row (a study whose
    # winner is its YaRN-cd seed) or two prompts with the same tokens share their key.
    todo_ppl = list({key: k for k, key in reversed(ppl_keys.items())
                     if store.get(key) is None}.values())[::-1]  # fmt: skip
    # the branched form runs eager on a fused model (`shared_prefix` unfuses), the single fused
    key_path = eager_path(store.path) if passkey_form == "branched" else store.path
    todo_keys = list({key: k for k, key in reversed(key_keys.items())
                      if store.get(key, path=key_path) is None}.values())[::-1]  # fmt: skip
    if todo_keys:  # before any forward: not the perplexities measured, then the keys refused
        check_form_runs(model, passkey_form)
    per_key = {n: 0.6 if passkey_form == "single" else 1.0 / max(1, keys) for n in lengths}
    bar = _bar(progress, sum(cost[k[0]] for k in todo_ppl)
               + sum(per_key[k[0]] * cost[k[0]] for k in todo_keys))  # fmt: skip
    measured = 0
    rows_by_name = {n: {r.name: r for r in table[n]} for n in lengths}
    with torch.inference_mode():
        for n, name, i in todo_ppl:
            row = rows_by_name[n][name]
            start = time.perf_counter()
            result = evaluate_perplexity(model, [documents[i][:n]], row.scaling, progress=progress)
            store.put(ppl_keys[(n, name, i)], {"nll": result.nll_sum, "tokens": result.n_tokens},
                      seconds=time.perf_counter() - start, doc=ids[i], row=name)  # fmt: skip
            measured += 1
            bar.update(cost[n])
            logger.info("validate %s at %d on %s: ppl %.4f", name, n, ids[i], result.ppl)
        pending: dict[tuple[int, str], list[int]] = {}
        for n, name, j in todo_keys:
            pending.setdefault((n, name), []).append(j)
        for (n, name), todo in pending.items():
            row = rows_by_name[n][name]
            start = time.perf_counter()
            patch = apply_rope_scaling(model, row.scaling) if row.scaling is not None else None
            with patch or contextlib.nullcontext():
                chosen = [prompts[n][j] for j in todo]
                for k, correct, nll in passkey_results(model, chosen, form=passkey_form):
                    j = todo[k]
                    store.put(key_keys[(n, name, j)], [bool(correct), float(nll)],
                              seconds=time.perf_counter() - start, path=key_path, row=name)  # fmt: skip
                    start = time.perf_counter()
                    measured += 1
                    bar.update(per_key[n] * cost[n])
    bar.close()
    validation = _collect(table, lengths, ids, keys, passkey_seed, prompts, store, ppl_keys,
                          key_keys, fingerprint, measured, key_path)  # fmt: skip
    validation.passkey_form = passkey_form
    return validation


def _classic(spec: RopeSpec, length: int, wanted: list[str]) -> list[Row]:
    # none alone is the model as it loads, at any length: a fine-tuned export past its trained
    # length, or the base model inside its window (the short context kept); the formulas are
    # built only where a length past the trained one gives them a meaning
    if set(wanted) <= {"none"}:
        return [Row("none", None, classic=True)] if wanted else []
    return [r for r in classic_rows(spec, length) if r.name in wanted]


def _collect(
    table: dict[int, list[Row]], lengths: list[int], ids: list[str], keys: int, seed: int,
    prompts: dict[int, list[Any]], store: MeasurementStore, ppl_keys: dict, key_keys: dict,
    fingerprint: str, measured: int, key_path: str,
) -> Validation:  # fmt: skip
    ppl: dict[int, dict[str, list[float]]] = {}
    passkey: dict[int, dict[str, list[bool]]] = {}
    paths: dict[int, dict[str, list[str]]] = {}
    for n in lengths:
        ppl[n], passkey[n], paths[n] = {}, {}, {}
        for row in table[n]:
            used: set[str] = set()
            values = []
            for i in range(len(ids)):
                found = store.get(ppl_keys[(n, row.name, i)])
                assert found is not None  # measured above
                value, path = found
                used.add(path)
                values.append(math.exp(value["nll"] / value["tokens"]))
            outcomes = []
            for j in range(keys):
                found = store.get(key_keys[(n, row.name, j)], path=key_path)
                assert found is not None
                outcomes.append(bool(found[0][0]))
                used.add(store.path if found[1] == key_path else found[1])  # made as this run would
            ppl[n][row.name], passkey[n][row.name], paths[n][row.name] = values, outcomes, sorted(used)
    first = table[lengths[0]]
    return Validation(
        lengths=lengths, documents=ids, keys=keys, passkey_seed=seed,
        rows=[r.name for r in first], classic=[r.name for r in first if r.classic],
        sources={r.name: r.source for r in first if not r.classic}, ppl=ppl, passkey=passkey,
        depths={n: [p.depth for p in prompts[n]] for n in lengths}, paths=paths, path=store.path,
        model=fingerprint, measured=measured,
        in_sample={r.name: dict(r.in_sample) for r in first if r.in_sample},
    )  # fmt: skip
