"""`compare_methods`: what `longrope-opt eval` does, as one function."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longrope_opt.data import check_source
from longrope_opt.data import load_samples
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import classic_rows
from longrope_opt.models import load_model
from longrope_opt.models import read_config
from longrope_opt.objectives import evaluate_passkey
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.patching import check_supported
from longrope_opt.rope import METHODS
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import get_method
from longrope_opt.rope import none
from longrope_opt.studies import factors_with_length
from longrope_opt.studies import load_named_study
from longrope_opt.studies import make_storage
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import stored_trained_length
from longrope_opt.viz import length_figure
from longrope_opt.viz import length_records


#: The classic rows of `validate` beyond `longrope_opt.rope.METHODS` (LongRoPE2's critical
#: dimension, with LongRoPE's attention scale): often the best formula at 2x and 4x.
CRITICAL = ("yarn-cd", "ntk-cd")


@dataclass
class MethodTable:
    """Values of every method at every length (perplexity, or passkey accuracy).

    Attributes:
        task: ``"perplexity"`` or ``"passkey"``.
        lengths: The lengths, in order.
        rows: ``{method: {length: value}}`` (``"searched"`` for given factors).
        title: What was measured, on what.
        files: Files written.
    """

    task: str
    lengths: list[int]
    rows: dict[str, dict[int, float]]
    title: str
    files: list[str]

    def format(self) -> str:
        """The table as the command prints it."""
        header = f"{'method':<12}" + "".join(f"{n:>10}" for n in self.lengths)
        fmt = "{:>10.0%}" if self.task == "passkey" else "{:>10.3f}"
        body = [f"{m:<12}" + "".join(fmt.format(r[n]) for n in self.lengths)
                for m, r in self.rows.items()]  # fmt: skip
        return "\n".join([self.title, header, "-" * len(header), *body])


def compare_methods(
    model: str = "smollm2-135m",
    *,
    methods: Sequence[str] = ("none", "pi", "ntk", "yarn"),
    lengths: Sequence[int] = (16384,),
    task: str = "perplexity",
    corpus: str = "builtin",
    samples: int = 2,
    seed: int = 0,
    mode: str = "truncate",
    stride: int | None = None,
    trials: int = 10,
    factors: str | None = None,
    study_name: str | None = None,
    storage: Any = None,
    dtype: str = "auto",
    device: str = "auto",
    attn: str | None = None,
    fuse: bool = True,
    output: str | Path | None = None,
    on_value: Callable[[str, int, float, str, float], None] | None = None,
) -> MethodTable:
    """Perplexity (or passkey accuracy) of RoPE methods, and of searched factors, at lengths.

    Args:
        model: The model (an exported directory evaluates as loaded with method ``"model"``).
        methods: Names in `longrope_opt.rope.METHODS`, or ``"model"``.
        lengths: Context lengths.
        task: ``"perplexity"`` or ``"passkey"``.
        corpus: Text of the perplexity task.
        samples: Documents per length.
        seed: Chooses the documents and the passkeys.
        mode: ``"truncate"`` or ``"sliding"`` (with `stride`).
        stride: The sliding window's stride.
        trials: Passkeys per length.
        factors: A factor file, evaluated as the row ``"searched"``.
        study_name: Or a study's winner (in `storage`).
        storage: Where `study_name` is.
        dtype: Compute path.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        attn: Attention kernel.
        fuse: Compile the element-wise work.
        output: Also write ``output.csv``, ``.json`` and ``.html`` (value against length).
        on_value: Called with ``(method, length, value, detail, seconds)`` as each is measured.

    Raises:
        InvalidArgumentError: Bad methods, counts, mode or factors; before the weights load.
    """
    methods = list(methods)
    if not methods:
        raise InvalidArgumentError("`methods` must name at least one method (e.g. none,yarn).")
    for m in methods:
        if m not in METHODS and m not in CRITICAL and m != "model":
            raise InvalidArgumentError(
                f"`methods` entries must be in {sorted([*METHODS, *CRITICAL, 'model'])}, got {m!r}."
            )
    for name, count in (("samples", samples), ("trials", trials)):
        if count < 1:
            raise InvalidArgumentError(f"`{name}` must be >= 1, got {count}.")
    if seed < 0:
        raise InvalidArgumentError(f"`seed` must be an integer >= 0, got {seed}.")
    if mode == "sliding" and (stride is None or stride < 1):
        raise InvalidArgumentError(
            f"`stride` must be an integer >= 1 with `mode` sliding (e.g. 256), got {stride}."
        )
    if factors and study_name:
        raise InvalidArgumentError("give `factors` or `study_name`, not both.")
    check_source(corpus)
    # A study's search may have been told the trained length: its rows are computed from it here
    # too (as `validate` does), so "searched" and the formulas mean what they meant there.
    trained, held = None, None
    if study_name:  # opened once: the trained length, the check and the factors read it
        held = make_storage(resolve_storage_url(storage), must_exist=True)
        trained = stored_trained_length(load_named_study(held, study_name))
    pre = read_config(model, trained_length=trained)  # checked before the weights load
    if pre is not None:
        _searched(factors, study_name, held, check_supported(pre))
    lm, tokenizer = load_model(model, dtype=dtype, device=device, attn=attn, fuse=fuse,
                               trained_length=trained)  # fmt: skip
    spec = RopeSpec.from_config(lm.config)
    plain = (getattr(lm.config, "rope_parameters", None) or {}).get("rope_type", "default") == "default"
    searched = _searched(factors, study_name, held, spec)
    if searched is not None:
        methods.append("searched")
    rows: dict[str, dict[int, float]] = {m: {} for m in methods}
    for length in lengths:
        docs = None if task == "passkey" else load_samples(
            corpus, tokenizer, length, samples, seed, full=mode == "sliding")  # fmt: skip
        unscaled: tuple[float, str] | None = None  # methods that leave the model as it is
        for method in methods:
            scaling = _scaling_for(method, length, spec, searched, plain)
            start = time.perf_counter()
            if scaling is None and unscaled is not None:
                value, detail = unscaled  # the same model on the same inputs: not run again
            elif task == "passkey":
                res = evaluate_passkey(lm, tokenizer, scaling, length, n_trials=trials,
                                       seed=seed, progress=True)  # fmt: skip
                value, detail = res.accuracy, f"{sum(res.correct)}/{len(res.correct)} keys"
            else:
                assert docs is not None  # loaded above for every task but passkey
                result = evaluate_perplexity(lm, docs, scaling, mode=mode, stride=stride,
                                             window=length, progress=True)  # fmt: skip
                value, detail = result.ppl, f"{result.n_tokens} tokens"
            if scaling is None:
                unscaled = (value, detail)
            rows[method][length] = value
            if on_value is not None:
                on_value(method, length, value, detail, time.perf_counter() - start)
    if task == "passkey":
        title = f"passkey accuracy ({trials} keys per length, seed {seed})"
    else:
        title = f"perplexity on {corpus!r} ({samples} sample(s), seed {seed}, {mode})"
    title += f" - {model}, trained at {spec.original_length}"
    table = MethodTable(task, list(lengths), rows, title, [])
    if output is not None:
        table.files = _write(str(output), table)
    return table


def _searched(factors: str | None, study_name: str | None, held: Any, spec: RopeSpec) -> Any:
    """The searched `RopeScaling` from a factor file or a study's winner in the opened storage
    `held` (None if neither)."""
    if not (factors or study_name):
        return None
    scaling, _ = factors_with_length(factors=factors, study_name=study_name, storage=held)
    try:
        return scaling.check(spec)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"searched factors do not fit this model: {exc}") from None


def _scaling_for(method: str, length: int, spec: RopeSpec, searched: Any, plain: bool) -> Any:
    # Within the trained window every method is the model as loaded (transformers' longrope
    # uses its short factors there); beyond it, the method's own scaling. "model" is the RoPE
    # the model was loaded with (e.g. an `export_model` directory) at every length.
    if method == "model" or length <= spec.original_length:
        return None
    if method == "none":
        return None if plain else none(spec)  # an extended model: force the pretrained angles
    if method == "searched":
        return searched
    if method in CRITICAL:  # YaRN / NTK with the critical-dimension correction, as validate has
        return {row.name: row.scaling for row in classic_rows(spec, length)}[method]
    return get_method(method)(spec, length)


def _write(prefix: str, table: MethodTable) -> list[str]:
    records = length_records(table.rows)
    value = "accuracy" if table.task == "passkey" else "ppl"
    with open(f"{prefix}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "length", value])
        for r in records:
            writer.writerow([r["method"], r["length"], r["ppl"]])
    with open(f"{prefix}.json", "w") as f:
        out = [{"method": r["method"], "length": r["length"], value: r["ppl"]} for r in records]
        json.dump({"task": table.task, "title": table.title, "rows": out}, f, indent=1)
    fig = length_figure(records, title=table.title)
    if table.task == "passkey":
        fig.update_layout(yaxis_type="linear", yaxis_title="passkey accuracy")
    fig.write_html(f"{prefix}.html", include_plotlyjs=True)
    return [f"{prefix}.csv", f"{prefix}.json", f"{prefix}.html"]
