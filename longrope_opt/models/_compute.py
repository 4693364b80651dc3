"""Compute paths: which dtype and attention run a long forward fastest on *this* CPU, measured.

The fastest exact path depends on the CPU: with AMX, bf16 matmuls and bf16 attention beat fp32;
with AVX-512-bf16 and no AMX, bf16 matmuls do but the bf16 attention kernel does not; with
neither, bf16 is emulated and fp32 wins. So the `auto` compute path times the candidate paths once per machine on
a short probe (a 2-layer slice of the model at a few thousand tokens: a few seconds), keeps the
fastest in the cache directory keyed by the CPU's name and instruction sets, and reuses it. A
forced compute path wins; a corrupt cache file is ignored with a warning and measured again.
Element-wise fusion is a separate switch (`fuse`): its one-off compile costs tens of seconds,
too much for a probe.
"""

from __future__ import annotations

import copy
import json
import logging
import platform
import time
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longrope_opt.files import write_text_atomic
from longrope_opt.registry import Registry


logger = logging.getLogger(__name__)

#: The cache file, in `longrope_opt.models.cache_dir()`.
CACHE_FILE = "compute-paths.json"
CACHE_VERSION = 1


@dataclass(frozen=True)
class ComputePath:
    """How a model runs: the dtype of its weights (and activations) and its attention.

    Attributes:
        name: Registry name (the CLI's dtype flag accepts it).
        dtype: ``"bfloat16"``, ``"float32"`` or ``"float16"``.
        attn: An attention implementation (see `longrope_opt.patching.ATTENTION_IMPLEMENTATIONS`).
    """

    name: str
    dtype: str
    attn: str


#: Every compute path by name; the first three are what `auto` times on a CPU.
PATHS: Registry[ComputePath] = Registry("compute path", param="dtype")
PATHS.add("bfloat16", ComputePath("bfloat16", "bfloat16", "sdpa"), "bf16 everywhere")
PATHS.add(
    "bf16-fp32attn",
    ComputePath("bf16-fp32attn", "bfloat16", "longrope_sdpa_fp32"),
    "bf16 linear layers, fp32 attention",
)
PATHS.add("float32", ComputePath("float32", "float32", "sdpa"), "fp32 everywhere")
PATHS.add("float16", ComputePath("float16", "float16", "sdpa"), "fp16 (GPUs)")
CPU_CANDIDATES = ("bfloat16", "bf16-fp32attn", "float32")


@dataclass(frozen=True)
class PathChoice:
    """A chosen path and why.

    Attributes:
        path: The path's name.
        cpu: The CPU it was measured on.
        seconds: Probe seconds per candidate (empty when forced or not measured).
        source: ``"forced"``, ``"measured"``, ``"cached"`` or ``"device"`` (a GPU default).
    """

    path: str
    cpu: str
    seconds: dict[str, float]
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (study provenance)."""
        return asdict(self)

    def describe(self) -> str:
        """One line for the user."""
        timing = ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items())
        return f"compute path {self.path} ({self.source} on {self.cpu}{'; ' + timing if timing else ''})"


def _first_processor(cpuinfo: str | None = None) -> dict[str, str]:
    # The first processor's fields of `cpuinfo` (default: /proc/cpuinfo; {} where it does not
    # exist): every core of one machine reports the same model and flags.
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    return fields


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; `platform.processor()` elsewhere)."""
    name = _first_processor().get("model name")
    return name or platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: Any) -> str:
    """What runs on `device` (a ``torch.device``): the GPU's name on CUDA, else the CPU's."""
    if getattr(device, "type", None) == "cuda":
        import torch  # on use: the CLI's flags read this module, and only CUDA asks

        return torch.cuda.get_device_name(device)
    return cpu_name()


#: The instruction sets that decide whether bf16 beats fp32 (``/proc/cpuinfo`` flag names).
MATMUL_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


def cpu_features(cpuinfo: str | None = None) -> str:
    """What tells two CPUs of one model name apart for the path choice: family, model and the
    matmul instruction sets (``/proc/cpuinfo``; empty where it does not exist).

    Cloud VMs often report only a vendor line ("AMD EPYC") for CPUs with and without
    AVX-512-bf16, where bf16 beats fp32 on one and is emulated, far slower, on the other; a
    cache keyed by the name alone would reuse the wrong choice.
    """
    fields = _first_processor(cpuinfo)
    flags = set(fields.get("flags", "").split())
    parts = [f"family {fields['cpu family']}"] if "cpu family" in fields else []
    parts += [f"model {fields['model']}"] if "model" in fields else []
    parts += [flag for flag in MATMUL_FLAGS if flag in flags]
    return " ".join(parts)


def _cache_key(cpu: str, threads: int, config: Any) -> str:
    # The ranking depends on the CPU (name and instruction sets), the threads, the kernels
    # (torch) and the layer shapes.
    import torch

    features = cpu_features()
    if features:
        cpu = f"{cpu} ({features})"
    shape = "x".join(
        str(getattr(config, k, "?"))
        for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size")
    )
    return f"{cpu} | {threads} threads | torch {torch.__version__} | {config.model_type} {shape}"


def read_cached(path: Path, key: str) -> dict[str, Any] | None:
    """The cached record for `key`, or None (a corrupt file is ignored with a warning)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            raise ValueError("unknown layout")
        choices = data.get("choices")
        if not isinstance(choices, dict):
            raise ValueError("no `choices` object")
        for name, record in choices.items():
            if not isinstance(record, dict) or record.get("path") not in PATHS:
                raise ValueError(f"entry {name!r} names no known path")
        return choices.get(key)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        logger.warning("ignoring the compute-path cache %s (%s); measuring again", path, exc)
        return None


def write_cached(path: Path, key: str, record: dict[str, Any]) -> None:
    """Store `record` under `key`, keeping other machines' entries (atomic replace)."""
    data: dict[str, Any] = {"version": CACHE_VERSION, "choices": {}}
    if path.is_file():
        try:
            old = json.loads(path.read_text())
            if isinstance(old, dict) and old.get("version") == CACHE_VERSION:
                data = old
        except (OSError, ValueError):
            pass
    data.setdefault("choices", {})[key] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=2))


def probe_seconds(model: Any, path: ComputePath, *, tokens: int, layers: int, reps: int) -> float:
    """Seconds of one forward of a `layers`-layer slice of `model` on `path` at `tokens` tokens
    (best of `reps`, after one warm-up)."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    from longrope_opt.patching import banded_for
    from longrope_opt.patching import set_attention
    from longrope_opt.patching import sliding_window_of

    piece = _slice(model, layers).to(getattr(torch, path.dtype))
    banded = sliding_window_of(piece.config) is not None
    set_attention(piece, banded_for(path.attn) if banded else path.attn)
    ids = torch.randint(0, int(piece.config.vocab_size), (1, tokens))  # (1, T)
    body = piece.get_decoder()
    best = float("inf")
    with torch.inference_mode():
        for i in range(reps + 1):
            start = time.perf_counter()
            body(input_ids=ids, use_cache=False)
            if i:  # the first run warms up kernels and allocations
                best = min(best, time.perf_counter() - start)
    return best


def _slice(model: Any, layers: int) -> Any:
    # A deep copy of the model with only its first `layers` decoder layers: the probe times the
    # same layer shapes and kernels as the full model in a fraction of the time.
    decoder = model.get_decoder()
    kept = decoder.layers
    decoder.layers = kept[:0]  # do not copy the layers we drop
    try:
        piece = copy.deepcopy(model)
    finally:
        decoder.layers = kept
    piece.get_decoder().layers = copy.deepcopy(kept[:layers])
    piece.config.num_hidden_layers = layers
    return piece.eval()


def choose_path(
    model: Any,
    *,
    cache: Path | None,
    candidates: tuple[str, ...] = CPU_CANDIDATES,
    tokens: int = 4096,
    layers: int = 2,
    reps: int = 2,
) -> PathChoice:
    """The fastest of `candidates` on this CPU: from `cache` when it has this CPU, else measured
    on `model` (any dtype; it is not modified) and stored in `cache`."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch

    cpu = cpu_name()
    key = _cache_key(cpu, torch.get_num_threads(), model.config)
    cache_path = None if cache is None else cache / CACHE_FILE
    if cache_path is not None:
        record = read_cached(cache_path, key)
        if record is not None and record["path"] in candidates:
            return PathChoice(record["path"], cpu, dict(record.get("seconds", {})), "cached")
    seconds = {
        name: round(probe_seconds(model, PATHS[name], tokens=tokens, layers=layers, reps=reps), 4)
        for name in candidates
    }
    best = min(seconds, key=lambda name: seconds[name])
    if cache_path is not None:
        write_cached(cache_path, key, {"path": best, "seconds": seconds, "measured": time.time()})
    return PathChoice(best, cpu, seconds, "measured")
