"""`finetune_and_export`: the fine-tuning stage as a command runs it, from factors to a model
directory (with the LoRA adapter beside the merged weights when it trained one)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from longrope_opt.data import PERL_DOC
from longrope_opt.data import load_samples
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import CLASSIC
from longrope_opt.evaluation import classic_rows
from longrope_opt.models import ADAPTER
from longrope_opt.models import check_gguf_arch
from longrope_opt.models import check_gguf_output
from longrope_opt.models import check_output_dir
from longrope_opt.models import export_gguf
from longrope_opt.models import export_model
from longrope_opt.models import gguf_source
from longrope_opt.models import load_model
from longrope_opt.models import read_gguf_arch
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import RopeSpec
from longrope_opt.rope import ShortLongScaling
from longrope_opt.studies import factors_with_length
from longrope_opt.studies import load_named_study
from longrope_opt.studies import make_storage
from longrope_opt.studies import resolve_storage_url
from longrope_opt.studies import stored_trained_length
from longrope_opt.training import FinetuneResult
from longrope_opt.training import default_learning_rate
from longrope_opt.training import finetune


def finetune_and_export(
    output: str | Path,
    *,
    factors: str | None = None,
    study_name: str | None = None,
    method: str | None = None,
    storage: Any = None,
    model: str = "smollm2-135m",
    corpus: str = PERL_DOC,
    target_length: int | None = None,
    samples: int | None = None,
    seed: int = 1,
    device: str = "auto",
    attn: str | None = None,
    overwrite: bool = False,
    save_dtype: str = "bfloat16",
    checkpoints: str | Path | None = None,
    trained_length: int | None = None,
    gguf: str | Path | None = None,
    **training: Any,
) -> tuple[FinetuneResult, Path, int]:
    """Fine-tune `model` with searched factors on long samples, then save it with them.

    Args:
        output: The model directory to write.
        factors: A factor file, or
        study_name: a study's winner (in `storage`), or
        method: a formula by name (``yarn-cd``, ``pi``, …: the rows `validate` measures, at
            `target_length`), recorded so that `validate` counts the model as a formula row.
        storage: Where `study_name` is.
        model: The model to fine-tune (loaded in fp32).
        corpus: Training text (default: Perl's manual, `longrope_opt.data.PERL_DOC`).
        target_length: Sequence length (default: the factors' target length).
        samples: Training sequences, read as consecutive windows of the corpus's documents
            in a seeded order (default: one per sequence the run trains on, ``steps ×
            grad_accum``, or as many as the corpus holds; the run cycles through them).
        seed: Chooses the documents.
        device: Where it trains.
        attn: Attention kernel.
        overwrite: Write into an existing non-empty directory.
        save_dtype: Dtype of the saved weights.
        checkpoints: Trainer's checkpoint folder, where a rerun resumes (default: the output's
            name with ``-checkpoints``, beside it).
        trained_length: The checkpoint's trained length when its config says otherwise
            (default: what the study's search was told, else the config's).
        gguf: Also write the fine-tuned model here as a GGUF for llama.cpp (its trained weights
            in the layout and tensor types of `model`'s own GGUF, `export_gguf`'s ``weights``),
            a Modelfile beside it. `model` must come as a GGUF (``smollm2-135m`` does).
        **training: `longrope_opt.training.finetune`'s settings (``steps``, ``learning_rate``,
            ``warmup_steps``, ``grad_accum``, ``autocast_dtype``, ``gradient_checkpointing``,
            ``pose_tokens``, ``short_share``, ``save_steps``, ``lora``; no ``learning_rate``:
            `longrope_opt.training.default_learning_rate`).

    Returns:
        ``(the run's FinetuneResult, the directory, the sequence length)``.
    """
    for name in ("steps", "grad_accum"):
        if training.get(name, 1) < 1:
            raise InvalidArgumentError(f"`{name}` must be >= 1, got {training[name]}.")
    if samples is not None and samples < 1:
        raise InvalidArgumentError(f"`samples` must be >= 1, got {samples}.")
    if seed < 0:
        raise InvalidArgumentError(f"`seed` must be an integer >= 0, got {seed}.")
    check_output_dir(output, overwrite=overwrite, source=model, param="output")
    if gguf is not None:  # before anything loads: a free name, a model that has a GGUF
        check_gguf_output(gguf, param="gguf")
        check_gguf_arch(read_gguf_arch(gguf_source(model)))
    if sum(map(bool, (factors, study_name, method))) != 1:
        raise InvalidArgumentError("give exactly one of `factors`, `study_name` or `method`.")
    if method is not None and method not in CLASSIC[1:]:
        raise InvalidArgumentError(f"`method` must be one of {', '.join(CLASSIC[1:])}, got {method!r}.")
    if method is not None and not target_length:
        raise InvalidArgumentError("`method` needs `target_length` (the formula's length).")
    held = make_storage(resolve_storage_url(storage), must_exist=True) if study_name else None
    scaling, length = None, target_length
    if method is None:
        scaling, length = factors_with_length(factors=factors, study_name=study_name, storage=held)
        length = target_length or length
    if not length:
        raise InvalidArgumentError("the factors record no target length; give `target_length`.")
    # The trained length the search was told (if any), so the factors mean what they meant there.
    trained = trained_length or (
        stored_trained_length(load_named_study(held, str(study_name))) if held else None)
    lm, tokenizer = load_model(model, dtype="float32", device=device, attn=attn,
                               trained_length=trained)  # fmt: skip
    spec = RopeSpec.from_config(lm.config)
    spec.scale(length)
    if scaling is None:  # the formula as `validate` measures it (its own attention scale)
        scaling = formula_scaling(spec, length, str(method))
    assert scaling is not None
    scaling.check(spec)
    # PoSE reads only its real tokens: documents that long suffice (far more of them than of
    # documents as long as the target)
    if training.get("learning_rate") is None:  # recorded as trained: 2e-5, or 2e-4 with LoRA
        training["learning_rate"] = default_learning_rate(training.get("lora"))
    pose = training.get("pose_tokens")
    wanted = samples or training.get("steps", 1) * training.get("grad_accum", 1)
    docs = list(load_samples(corpus, tokenizer, pose or length, wanted, seed, windows=wanted,
                             at_most=samples is None))  # fmt: skip
    # a document's windows come out together: spread them over the run
    docs = [docs[i] for i in np.random.default_rng(seed).permutation(len(docs))]
    if checkpoints is None:  # beside the output, never inside it: the output stays a model dir
        checkpoints = Path(output).expanduser().with_name(Path(output).name + "-checkpoints")
    short = training.pop("short_share", 0.0)
    mixed: RopeScaling | ShortLongScaling = scaling
    if short:  # mixed windows: short samples under the original RoPE, by the longrope rule
        mixed = ShortLongScaling(RopeScaling(np.ones(spec.n_factors)), scaling, spec.original_length)
    result = finetune(lm, docs, mixed, seed=seed, output_dir=checkpoints, short_share=short,
                      target_length=length if pose else None, **training)  # fmt: skip
    meta = {"finetune": {
        "steps": training.get("steps"), "losses": result.losses, "tokens": result.tokens,
        "seconds": round(result.seconds, 1), "resumed_step": result.resumed_step,
        "learning_rate": training.get("learning_rate"),
        "pose_tokens": training.get("pose_tokens"), "short_share": short, "corpus": corpus,
        "seed": seed, "method": method,
        "base_model": model, "save_dtype": save_dtype,
    }}  # fmt: skip
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun one process writes: the first
        return result, Path(output).expanduser(), length
    with tempfile.TemporaryDirectory(prefix="longrope-adapter-") as kept:
        if result.adapter is not None:  # LoRA: the adapter is kept, its merge is what exports
            meta["finetune"]["lora"] = training.get("lora")
            # saved before the merge: merging unwraps the adapted layers, and an adapter saved
            # after it holds names peft cannot load back
            result.adapter.save_pretrained(kept)
            lm = result.adapter.merge_and_unload()
        out = export_model(lm, tokenizer, output, scaling, target_length=length, dtype=save_dtype,
                           metadata=meta, overwrite=overwrite)  # fmt: skip
        if result.adapter is not None:
            # beside the merged weights, a few MB: peft loads it on the model extended with the
            # same factors before fine-tuning; without the merged weights the directory still
            # loads (`longrope_opt.models.merged_adapter_dir`), for a comparison re-checked
            # elsewhere
            shutil.copytree(kept, out / ADAPTER, dirs_exist_ok=True)
    if gguf is not None:
        export_gguf(gguf_source(model), gguf, scaling, spec=spec, target_length=length,
                    weights=lm)  # fmt: skip
    # the model is written: its checkpoints (weights and optimizer state, GBs) are not needed
    folder = Path(checkpoints)
    for done in folder.glob("checkpoint-*"):  # Trainer's own folders only, whatever DIR is
        shutil.rmtree(done, ignore_errors=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return result, out, length


def formula_scaling(spec: RopeSpec, length: int, name: str) -> Any:
    """The factors of classic row `name` at `length`, as `validate` measures it (its own
    attention scale): what a formula is fine-tuned and shipped with."""
    return next(r.scaling for r in classic_rows(spec, length) if r.name == name)


def finetuned_from_formula(config: Any) -> bool:
    """Whether a model directory's config says it was fine-tuned from a formula (`method`)."""
    record = getattr(config, "longrope_opt", None)
    finetuned = record.get("finetune") if isinstance(record, dict) else None
    return isinstance(finetuned, dict) and finetuned.get("method") in CLASSIC
