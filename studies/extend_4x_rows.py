"""The 4x table's rows, shared by studies/extend_4x_smollm2.py and the benches that read its table:
the classic methods at a length, the held-out windows, the search winners read back from the
study file, and loading the model with bad input as one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn


STUDIES = ("plain", "new", "floor")  # the table's search rows, in this order


def classic_methods(config, length: int) -> dict:
    """The table's classic rows at `length`: none, PI, NTK, YaRN, and YaRN / NTK with the
    critical-dimension correction (t by the search space's default rule, as the searches' seeds),
    by name."""
    from longrope_opt import RopeScaling
    from longrope_opt import RopeSpec
    from longrope_opt.rope import METHODS
    from longrope_opt.space import SearchSpace

    spec = RopeSpec.from_config(config)
    t = SearchSpace(spec, length).fixed_attention_scale
    methods: dict[str, RopeScaling | None] = {"none": None}
    for m in ("pi", "ntk", "yarn"):
        methods[m] = METHODS[m](spec, length)
    critical = SearchSpace(spec, length, shape="critical")
    for name, params in critical.seed_params()[:2]:
        sc = critical.to_scaling(params)
        methods[name] = RopeScaling(sc.factors, 0, t, method=name)
    return methods


def held_out(corpus: str, tokenizer, length: int, n: int):
    """The table's `n` held-out windows (seed 101; the search and re-rank never see them)."""
    from longrope_opt.data import load_samples

    return load_samples(corpus, tokenizer, length, n, seed=101, windows=n)


def fail(message: str) -> NoReturn:
    """One line on stderr and exit code 2, as argparse does for a bad argument."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def load(model_name: str, dtype: str) -> tuple:
    """`load_model`, with a bad `--model`/`--dtype` as one line and exit 2 (not a traceback)."""
    from longrope_opt.errors import LongRopeOptError
    from longrope_opt.models import load_model

    try:
        return load_model(model_name, dtype=dtype, fuse=dtype != "float32")
    except LongRopeOptError as exc:
        fail(str(exc))


def above_trained(model, flag: str, length: int) -> None:
    """A `length` at or below the model's trained one is one line and exit 2."""
    from longrope_opt import RopeSpec

    trained = RopeSpec.from_config(model.config).original_length
    if length <= trained:
        fail(f"{flag} must be above the model's trained length {trained}, got {length}")


def load_table(out: str, model_name: str, dtype: str, length: int, flag: str) -> tuple:
    """What a bench script re-reads of the table: ``(raw results, model, tokenizer, rows)``.

    The rows are the classic methods at `length` (the bench's option `flag`), then each search's
    re-ranked winner from ``<out>.db`` (``plain-search``, ``new-search``, ``floor-search``: those
    searched), by name; the raw results are ``<out>.json``."""
    import optuna

    from longrope_opt.studies import reranked_best

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not Path(f"{out}.json").is_file():  # before get_all_study_names makes an empty <out>.db
        fail(f"--out: no table at {out}.json (run studies/extend_4x_smollm2.py first)")
    raw = json.loads(Path(f"{out}.json").read_text())
    model, tok = load(model_name, dtype)
    above_trained(model, flag, length)
    methods = classic_methods(model.config, length)
    storage = f"sqlite:///{out}.db"
    names = optuna.get_all_study_names(storage)
    for key in (k for k in STUDIES if f"4x-{k}" in names):
        study = optuna.load_study(study_name=f"4x-{key}", storage=storage)
        best = reranked_best(study)
        if best is not None:
            methods[f"{key}-search"] = best[0]
    return raw, model, tok, methods
