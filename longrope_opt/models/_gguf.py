"""`export_gguf`: the extended model as a GGUF that llama.cpp runs at its new length.

The source GGUF's tensors are copied byte for byte (a quantized model stays quantized, nothing is
re-quantized), or, for a fine-tuned model, taken from its weights in the same layout and types
(`longrope_opt.models._gguf_weights`); what changes is RoPE metadata and one or two tiny tensors of per-dimension factors,
each rotary frequency divided by its factor (exactly λ, composed with the checkpoint's own ν):

- form ``"longrope"``: ``rope.scaling.type = longrope`` with ``rope_factors_long`` and
  ``rope_factors_short``. llama.cpp's llama architecture loads both for this type and picks one
  by the *context size*, not the prompt (``llama_model::get_rope_factors``): a context per
  sequence above ``rope.scaling.original_context_length`` uses the long factors for every prompt,
  a smaller one the short factors, so a model run at its trained window is the model as it was.
- form ``"freqs"``: one ``rope_freqs`` tensor, Llama 3.1's slot, read by llama.cpp builds since
  2024 and the engines that vendor them; the long factors at every context size.

The attention factor t goes to ``rope.scaling.attn_factor``, which llama.cpp multiplies into
ggml's rope ``attn_factor``: cos and sin are scaled by it (with ``yarn_ext_factor`` 0 for these
types), as transformers' ``attention_factor`` scales them. n̂ (start tokens kept at the pretrained
angle) has no slot: a winner with n̂ > 0 is refused unless the caller consents to drop it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models._aliases import ALIASES
from longrope_opt.models._aliases import alias_gguf
from longrope_opt.models._export import as_pair
from longrope_opt.models._gguf_weights import model_tensors
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling


#: How the factors are written: see the module docstring.
GGUF_FORMS = ("longrope", "freqs")
#: Architectures whose llama.cpp graph reads the factor tensors with the layout written here.
GGUF_ARCHS = ("llama",)
#: Architectures whose llama.cpp graph applies no per-dimension factors, and what it does instead
#: (read in the llama.cpp that llama-cpp-python 0.3.36 vendors, `src/models/<arch>.cpp`).
NO_FACTORS = {
    "gemma3": "llama.cpp's gemma3 graph gives ggml_rope_ext no factor tensor on any layer (it "
              "applies one linear or YaRN scale to the global layers); serve the model "
              "directory instead (transformers, vLLM)",
}  # fmt: skip
#: The tensors this export owns: a source's own are replaced (Llama 3.1's ``rope_freqs``).
FACTOR_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


@dataclasses.dataclass(frozen=True)
class GgufExport:
    """What `export_gguf` wrote.

    Attributes:
        path: The ``.gguf`` file.
        modelfile: The Ollama ``Modelfile`` beside it.
        form: ``"longrope"`` or ``"freqs"``.
        target_length: The context length in its metadata.
        attention_factor: ``rope.scaling.attn_factor``.
        dropped_n_hat: The winner's n̂ that the GGUF cannot hold (0: nothing dropped).
    """

    path: Path
    modelfile: Path
    form: str
    target_length: int
    attention_factor: float
    dropped_n_hat: int


def check_gguf_output(path: str | Path, *, param: str = "output") -> Path:
    """Refuse a GGUF path that exists or does not end in ``.gguf``, before any work is done.

    Raises:
        InvalidArgumentError: One line naming `param`.
    """
    out = Path(path).expanduser()
    if out.suffix != ".gguf":
        raise InvalidArgumentError(f"`{param}` must end in .gguf, got {str(out)!r}.")
    if out.exists():
        raise InvalidArgumentError(
            f"`{param}` {str(out)!r} exists; choose a new file (nothing is overwritten)."
        )
    return out


def gguf_source(model: str | Path) -> Path:
    """The GGUF a model name stands for: an alias's published file (``smollm2-135m``, ``gemma3-270m``), a ``.gguf``
    path, or a directory's only ``.gguf`` (one without a transformers ``config.json``).

    Raises:
        InvalidArgumentError: A transformers model directory or hub id: there is no GGUF to copy
            (llama.cpp's ``convert_hf_to_gguf.py`` makes one; pass it as the source).
    """
    if str(model) in ALIASES:
        return alias_gguf(str(model))
    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return path
    ggufs = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if len(ggufs) == 1 and not (path / "config.json").is_file():
        return ggufs[0]
    raise InvalidArgumentError(
        f"model {str(model)!r} is not a GGUF: a GGUF export copies a GGUF's tensors; convert it "
        "with llama.cpp's convert_hf_to_gguf.py and pass that file as the GGUF source."
    )


def read_gguf_arch(source: str | Path) -> str:
    """The ``general.architecture`` of a GGUF file.

    Raises:
        InvalidArgumentError: Not a readable GGUF file.
    """
    import gguf  # on use: reading the header maps the file

    try:
        reader = gguf.GGUFReader(str(source))
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"`source` {str(source)!r} is not a GGUF file: {exc}") from exc
    return str(reader.fields["general.architecture"].contents())


def check_gguf_arch(arch: str) -> None:
    """Refuse, in one line, a GGUF architecture llama.cpp runs without per-dimension factors.

    Raises:
        InvalidArgumentError: `arch` is not one of `GGUF_ARCHS`.
    """
    if arch in GGUF_ARCHS:
        return
    why = NO_FACTORS.get(arch, f"llama.cpp reads per-dimension RoPE factors this way for "
                               f"{list(GGUF_ARCHS)} (SmolLM2, Llama, Mistral)")  # fmt: skip
    raise InvalidArgumentError(f"GGUF architecture {arch!r} is not supported: {why}.")


def export_gguf(
    source: str | Path,
    output: str | Path,
    scaling: RopeScaling | ShortLongScaling,
    *,
    spec: RopeSpec,
    target_length: int,
    form: str = "longrope",
    drop_n_hat: bool = False,
    weights: Any = None,
) -> GgufExport:
    """Write `source` with `scaling` as its RoPE to `output`, a GGUF llama.cpp runs at `target_length`.

    Args:
        source: The model's GGUF (its tensors are copied as they are).
        output: The new ``.gguf`` (must not exist); a ``Modelfile`` is written beside it.
        scaling: The long factors alone, or a short/long pair (relative to `spec`).
        spec: The RoPE the factors act on (the source's, as transformers reads it).
        target_length: The context length the factors are for.
        form: ``"longrope"`` (long and short factors, chosen by context size) or ``"freqs"``.
        drop_n_hat: Write a winner with n̂ > 0 without its n̂ (GGUF has no slot for it).
        weights: A model whose weights replace the source's (a fine-tuned model: its GGUF
            holds the trained weights, in the source's layout and tensor types where gguf can
            quantize to them, `longrope_opt.models._gguf_weights`). None: the source's, copied.

    Returns:
        What was written.

    Raises:
        InvalidArgumentError: An unknown form, an existing output, an architecture llama.cpp does
            not rescale this way, factors that do not fit its rotary dimensions, or n̂ > 0
            without `drop_n_hat`.
    """
    import gguf  # on use: `longrope_opt.models` stays light

    if form not in GGUF_FORMS:
        raise InvalidArgumentError(f"`form` must be one of {list(GGUF_FORMS)}, got {form!r}.")
    out = check_gguf_output(output)
    pair = as_pair(scaling, spec)  # a single set: ones as short factors, its own t
    pair.long.check(spec)
    n_hat = max(pair.long.n_hat, pair.short.n_hat)
    if n_hat > 0 and not drop_n_hat:
        raise InvalidArgumentError(
            f"the factors keep n_hat={n_hat} start tokens unscaled, which GGUF cannot hold; "
            "pass `drop_n_hat` to export them without it, or search with n_hat 0."
        )
    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields["general.architecture"].contents())
    check_gguf_arch(arch)
    native = spec.native()
    long = (native * pair.long.factors).astype(np.float32)
    short = (native * pair.short.factors).astype(np.float32)
    rot = reader.fields.get(f"{arch}.rope.dimension_count")
    half = int(rot.contents()) // 2 if rot is not None else None
    if half is not None and half != long.size:
        raise InvalidArgumentError(
            f"the factors have {long.size} entries; the GGUF rotates {2 * half} dimensions "
            f"({half} factors): the study is for another model."
        )
    attention = float(spec.native_attention * pair.long.attention_scale)
    keys = {
        f"{arch}.context_length": (int(target_length), gguf.GGUFValueType.UINT32),
        # "linear" with no factor: llama.cpp's default, a frequency scale of 1 (a source's own
        # yarn or linear type would act on top of the factors)
        f"{arch}.rope.scaling.type": (form if form == "longrope" else "linear",
                                      gguf.GGUFValueType.STRING),
        f"{arch}.rope.scaling.original_context_length": (int(spec.original_length),
                                                         gguf.GGUFValueType.UINT32),
        f"{arch}.rope.scaling.attn_factor": (attention, gguf.GGUFValueType.FLOAT32),
    }  # fmt: skip
    # a source's own linear/yarn factor would scale on top of the factors: they replace it
    dropped = {f"{arch}.rope.scaling.factor", f"{arch}.rope.scaling.finetuned"}
    f32 = gguf.GGMLQuantizationType.F32
    tensors = ({"rope_factors_long.weight": (long, f32), "rope_factors_short.weight": (short, f32)}
               if form == "longrope" else {"rope_freqs.weight": (long, f32)})  # fmt: skip
    replaced = {} if weights is None else model_tensors(reader, weights, arch, skip=FACTOR_TENSORS)
    out.parent.mkdir(parents=True, exist_ok=True)
    # write beside the target and rename at the end: a killed export leaves no half file
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}-", suffix=".part")
    os.close(fd)
    try:
        _write(reader, Path(tmp), arch, keys, dropped, tensors, replaced)
        umask = os.umask(0)  # mkstemp makes a private file; the export is an ordinary one
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    modelfile = out.with_name("Modelfile")
    if not modelfile.exists():  # another export's Modelfile in the same folder stays
        modelfile.write_text(f"FROM ./{out.name}\nPARAMETER num_ctx {int(target_length)}\n")
    return GgufExport(out, modelfile, form, int(target_length), attention, n_hat)


def _write(
    reader: Any,
    path: Path,
    arch: str,
    keys: dict[str, tuple[Any, Any]],
    dropped: set[str],
    tensors: dict[str, tuple[np.ndarray, Any]],
    replaced: dict[str, tuple[np.ndarray, Any]],
) -> None:
    """Copy `reader`'s metadata (with `keys` set, `dropped` removed) and tensors (those named in
    `replaced` taken from there instead, the factor tensors replaced by `tensors`, each
    ``(data, GGML type)``) to `path`, as gguf's own ``gguf_new_metadata`` copies."""
    import gguf  # on use, as in `export_gguf`: `longrope_opt.models` stays light

    writer = gguf.GGUFWriter(str(path), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        name = field.name
        if name == "general.architecture" or name.startswith("GGUF.") or name in dropped:
            continue
        if name in keys:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)
    for name, (value, kind) in keys.items():
        writer.add_key_value(name, value, kind)
    # the source's order, each tensor its own or its replacement; then the factor tensors
    kept = [(t.name, replaced.get(t.name, (t.data, t.tensor_type))) for t in reader.tensors
            if t.name not in FACTOR_TENSORS]  # fmt: skip
    written = kept + list(tensors.items())
    for name, (data, kind) in written:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, (data, _) in written:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
