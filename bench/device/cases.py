"""What the CPU references and the device's correctness check both measure, defined once.

Perplexity of SmolLM2-135M on one document at 4k and 16k tokens for the model as it is, YaRN to
the length, and a searched 16k vector (`bench/results/searched-smollm2-16k.json`); passkeys (3
keys, seed 0) at 4k for all three and at 16k for the two that extend.

The document travels with the cases (`case-text.txt`): the built-in corpus is the running
CPython's reference manual and stdlib, so a device with another Python read other text (3.12
against the references' 3.11: 5 % apart at 4k). It is the built-in corpus's seed-0 document the
references were measured on (`pydoc_data.topics` of CPython 3.11, PSF licence), cut a few hundred
tokens past 16k: the same token windows at 4k and 16k.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "bench/device/cpu_reference.json"
TEXT = ROOT / "bench/device/case-text.txt"
LENGTHS = (4096, 16384)
PASSKEYS = 3
TOLERANCE = 0.01  # relative perplexity difference a device may show against the CPU's fp32


def methods(spec: Any) -> dict[str, Callable[[int], Any]]:
    """Name -> (length -> RoPE scaling or None) for the methods the check compares."""
    from longrope_opt import RopeScaling
    from longrope_opt.rope import yarn

    searched = json.loads((ROOT / "bench/results/searched-smollm2-16k.json").read_text())
    return {
        "none": lambda n: None,
        "yarn": lambda n: yarn(spec, max(n, 2 * spec.original_length)),
        "searched": lambda n: RopeScaling.from_dict(searched),
    }


def cases() -> list[tuple[str, str, int]]:
    """(kind, method, length) of every reference measurement, in the order they are made."""
    out = [("ppl", m, n) for n in LENGTHS for m in ("none", "yarn", "searched")]
    out += [("passkey", m, 4096) for m in ("none", "yarn", "searched")]
    out += [("passkey", m, 16384) for m in ("yarn", "searched")]
    return out


def key(kind: str, method: str, length: int) -> str:
    return f"{kind}/{method}/{length}"


def measure(model: Any, tokenizer: Any, kind: str, method: str, length: int) -> dict[str, Any]:
    """One case on `model` (wherever it is): perplexity, or which passkeys were found."""
    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.objectives import evaluate_passkey
    from longrope_opt.objectives import evaluate_perplexity

    scaling = methods(RopeSpec.from_config(model.config))[method](length)
    if kind == "ppl":
        samples = load_samples(str(TEXT), tokenizer, length, 1, seed=0)
        return {"ppl": evaluate_perplexity(model, samples, scaling).ppl}
    result = evaluate_passkey(model, tokenizer, scaling, length, n_trials=PASSKEYS, seed=0)
    return {"correct": list(result.correct), "nll": list(result.nll)}
