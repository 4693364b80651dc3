"""Measurements kept as they are made, keyed by what they measured, in the Optuna storage.

A validation table is hours of forwards on a CPU. Each measurement (one document's perplexity,
one passkey prompt's outcome) is written to the storage the moment it exists, under a key made of
what it measured: the model (a fingerprint of its weights and RoPE, not its name or dtype), the
content (token hash), the length, and the scaling (λ, n̂, t). So a rerun measures nothing twice,
an interruption loses one forward at most, adding a row or a document measures only what is new,
and a classic row's passkeys, which do not depend on the corpus, serve every table.

The store is the user attrs of one study of the storage (`STORE_STUDY`): every storage Optuna
supports works (SQLite, PostgreSQL, journal, gRPC proxy), each write is one row, and workers on
other machines share it. A record is kept per compute path (``float32``, ``bf16-fp32attn``, …,
``-fused`` when the element-wise work is compiled: `measurement_path`): the same measurement made
two ways differs at the precision of the path, and two processes measuring one cell two ways at
once each keep their own record rather than the later overwriting the earlier.

A scaling is keyed by its numbers rounded to `KEY_DIGITS` significant digits: the same formula
computed on two CPUs can differ in its last bit (numpy's AVX-512 ``power`` is not its AVX2 one),
and a key of the raw bits would miss every record made on the other machine. Keys of the raw
bits, which an earlier version wrote, are still found (`measurement_key`'s ``exact``) and adopted
under the rounded key on first use.

Each record names the version of the measuring code that made it (`MEASUREMENT_VERSION`), and
only records of this version are used: a change to how a perplexity window or a passkey prompt is
built or scored bumps it, and every number measured before is measured again rather than mixed
into a table with numbers measured after. Records written before versions were kept count as
version 1, except those copied into a store from a printed table (``imported``), which no
version of this store measured.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import numpy as np
import optuna
import torch

from longrope_opt.patching import is_fused
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec


#: The study whose user attrs hold the measurements.
STORE_STUDY = "longrope_opt:measurements"

#: The measuring code's version: bump it when a change makes a measurement differ.
MEASUREMENT_VERSION = 1


def record_version(record: dict[str, Any]) -> int | None:
    """The measuring version of one record (None: imported from a table, version unknown)."""
    if "imported" in record:
        return None
    return int(record.get("version", 1))


def model_fingerprint(model: Any) -> str:
    """A short id of a model's weights and RoPE, the same whatever its dtype or device.

    Made of its RoPE spec, its rope parameters and the first 256 rows of its input embedding
    rounded to bfloat16 (so a float32 and a bfloat16 load of one checkpoint agree, and another
    checkpoint of the same architecture does not).
    """

    spec = RopeSpec.from_config(model.config)
    rope = getattr(model.config, "rope_parameters", None) or getattr(
        model.config, "rope_scaling", None
    )
    head = [model.config.model_type, spec.head_dim, spec.base, spec.original_length,
            spec.rotary_dim, json.dumps(rope, sort_keys=True, default=str)]  # fmt: skip
    rows = model.get_input_embeddings().weight[:256].detach().to("cpu", torch.bfloat16)
    h = hashlib.sha256(json.dumps(head).encode())
    h.update(rows.float().numpy().tobytes())
    return h.hexdigest()[:16]


def tokens_hash(ids: Any) -> str:
    """Fingerprint of a token sequence (a tensor or a list of ints)."""
    array = np.asarray(ids.tolist() if hasattr(ids, "tolist") else ids, dtype=np.int64)
    return hashlib.sha256(array.tobytes()).hexdigest()[:16]


#: Significant digits of a scaling's numbers in a key: far above what a forward can tell apart,
#: far below where two CPUs' last bits differ.
KEY_DIGITS = 12


def _rounded(x: float, exact: bool) -> float:
    return float(x) if exact else float(f"{float(x):.{KEY_DIGITS}g}")


def scaling_identity(scaling: RopeScaling | None, *, exact: bool = False) -> Any:
    """What makes two scalings the same measurement (JSON-ready; None: the model as it is).

    Args:
        scaling: The scaling, or None.
        exact: The raw float64 bits (the keys of an earlier version), not `KEY_DIGITS` digits.
    """
    if scaling is None:
        return None
    return {
        "factors": [_rounded(x, exact) for x in np.asarray(scaling.factors, dtype=np.float64)],
        "n_hat": int(scaling.n_hat),
        "attention_scale": _rounded(scaling.attention_scale, exact),
    }


def measurement_key(
    kind: str, model: str, content: str, length: int, scaling: Any, *, exact: bool = False
) -> str:
    """The store key of one measurement (``kind:digest``); ``exact``: an earlier version's key."""
    what = [kind, model, content, int(length), scaling_identity(scaling, exact=exact)]
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]
    return f"{kind}:{digest}"


#: What `measurement_path` appends to the compute path of a model whose element-wise work is fused.
FUSED_SUFFIX = "-fused"


def measurement_path(model: Any, default: str) -> str:
    """The compute path `model`'s measurements are kept under, for `MeasurementStore`.

    Args:
        model: A loaded model; `longrope_opt.models.load_model` records its compute path on it.
        default: The path to name when the model carries none (one loaded otherwise).

    Returns:
        The path's name, with ``-fused`` when its element-wise work is compiled
        (`longrope_opt.patching.fuse_elementwise`): fused kernels keep intermediates in fp32
        where eager bf16 rounds each op, so a fused forward's perplexity is not an eager one's.
    """
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path", default)
    return f"{path}{FUSED_SUFFIX}" if is_fused(model) else str(path)


def eager_path(path: str) -> str:
    """`path` without its fusion: the path of a measurement that runs eager on a fused model
    (the branched passkey form: `longrope_opt.patching.shared_prefix` unfuses while it runs)."""
    return path.removesuffix(FUSED_SUFFIX)


class MeasurementStore:
    """Measurements in an Optuna storage (see the module docstring).

    Args:
        storage: An Optuna storage or URL.
        path: The compute path of this process's measurements (e.g. ``"float32"``).
        reuse_other_paths: Use a record made on another compute path when this path has none
            (the table says so); False measures again on this path.
    """

    def __init__(self, storage: Any, *, path: str, reuse_other_paths: bool = True) -> None:
        self._study = optuna.create_study(
            storage=storage, study_name=STORE_STUDY, load_if_exists=True
        )
        self._records: dict[str, dict[str, Any]] = dict(self._study.user_attrs)
        self.path = path
        self.reuse_other_paths = reuse_other_paths

    def _current(self, key: str) -> dict[str, Any]:
        """The records of `key` by path, those of this `MEASUREMENT_VERSION` only."""
        by_path = self._records.get(key) or {}
        return {p: r for p, r in by_path.items() if record_version(r) == MEASUREMENT_VERSION}

    def stale(self, key: str) -> bool:
        """Whether `key` has records, but none of this measuring version (it is measured again)."""
        return bool(self._records.get(key)) and not self._current(key)

    def get(self, key: str, *, path: str | None = None) -> tuple[Any, str] | None:
        """``(value, path it was measured on)``, preferring this process's path (or `path`, the
        one this measurement would run on), or None; only records of this `MEASUREMENT_VERSION`."""
        path = path or self.path
        by_path = self._current(key)
        if path in by_path:
            return by_path[path]["value"], path
        if self.reuse_other_paths and by_path:
            other = sorted(by_path)[0]
            return by_path[other]["value"], other
        return None

    def put(
        self,
        key: str,
        value: Any,
        *,
        seconds: float | None = None,
        path: str | None = None,
        **extra: Any,
    ) -> None:
        """Store `value` (JSON-ready) for this process's path (or `path`, the one it ran on)."""
        by_path = dict(self._study.user_attrs.get(key) or {})  # another worker's paths kept
        by_path[path or self.path] = {
            "value": value,
            "seconds": None if seconds is None else round(float(seconds), 3),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra,
            "version": MEASUREMENT_VERSION,
        }
        self._study.set_user_attr(key, by_path)
        self._records[key] = by_path

    def adopt(self, key: str, old_key: str) -> bool:
        """Copy the records under `old_key` to `key` when `key` has none; True if it did."""
        if key == old_key or key in self._records or old_key not in self._records:
            return False
        self._study.set_user_attr(key, self._records[old_key])
        self._records[key] = self._records[old_key]
        return True

    def __len__(self) -> int:
        return len(self._records)
