"""`finetune`: next-token training of a RoPE-patched model, on transformers' `Trainer`.

What is ours: the searched RoPE for the whole run (`apply_rope_scaling`, exactly as the search
evaluated it; a `ShortLongScaling` switches sets per sample by transformers' ``longrope`` rule),
PoSE position ids and mixed context windows (`PoseSamples`), gradient checkpointing of every
decoder layer, and the LM head's loss over chunks of positions (`chunked_nll`, each chunk
recomputed in backward) so that no step holds sequence × vocabulary logits. What is Trainer's:
AdamW with warm-up and linear decay, accumulation, clipping, mixed precision, checkpoints every
`save_steps` with the oldest pruned, `resume_from_checkpoint`, logging, and DDP under torchrun or
`accelerate launch` (gloo on CPUs, NCCL on GPUs).

The loss lives in the forward of a small wrapper module (`ChunkedLoss`) rather than in an
overridden ``compute_loss`` that reaches past the model: Trainer wraps what it is given in
DistributedDataParallel, and DDP synchronises gradients only for forwards that go through it.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.errors import LongRopeOptError
from longrope_opt.models import chunked_nll
from longrope_opt.models import decoder_hidden
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.rope import RopeScaling
from longrope_opt.rope import ShortLongScaling
from longrope_opt.training._lora import add_lora
from longrope_opt.training._pose import PoseSamples


logger = logging.getLogger(__name__)


@dataclass
class FinetuneResult:
    """What a fine-tuning run did.

    Attributes:
        losses: Mean next-token loss (nats/token) of each optimizer step, the resumed run's
            earlier steps included (read from its checkpoint).
        tokens: Tokens the run trained on (predicted next tokens), all processes together, the
            steps before a resume included: what the run saw, however many calls it took.
        seconds: Wall time of this call's training (a resumed run's earlier calls not counted).
        resumed_from: The checkpoint this call resumed from (None: a fresh run).
        resumed_step: The optimizer steps done before this call (0: a fresh run).
        adapter: With `lora`: the `peft.PeftModel` trained (``save_pretrained`` writes the
            adapter; ``merge_and_unload`` folds it into the model).
    """

    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    resumed_from: str | None = None
    resumed_step: int = 0
    adapter: Any = None


def _check(name: str, value: Any, low: float, kind: type = int) -> None:
    what = "an integer" if kind is int else "a finite number"
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if not (ok and math.isfinite(value) and value >= low):
        raise InvalidArgumentError(f"`{name}` must be {what} >= {low}, got {value!r}.")


class ChunkedLoss(nn.Module):
    """The causal LM with its loss as the forward: what Trainer (and DDP) run each micro-step.

    ``forward(input_ids, position_ids)`` on a batch of one sequence returns ``{"loss": mean
    next-token NLL}``, the LM head applied chunk by chunk (`chunked_nll`, recomputed in backward).
    """

    def __init__(self, lm: nn.Module, *, chunk_size: int = 2048) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_size = chunk_size
        self.tokens = 0

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        """``{"loss": mean next-token NLL}`` of one sequence (``(1, T)`` ids and positions)."""
        ids, positions = input_ids[0], position_ids[0]  # (T,) each: one sequence a micro-step
        hidden = decoder_hidden(self.lm, ids[:-1], positions[:-1].tolist())
        targets = ids[1:]
        total, _ = chunked_nll(
            self.lm, hidden, targets, chunk_size=self.chunk_size, recompute=True
        )
        loss = total / targets.numel()
        if not torch.isfinite(loss):
            raise LongRopeOptError(
                f"fine-tuning loss is {float(loss.detach())}; lower `learning_rate` or check the factors."
            )
        self.tokens += int(targets.numel())
        return {"loss": loss}


def _checkpointing(model: Any, on: bool) -> None:
    # transformers 5.x renamed gradient_checkpointing_* to activation_checkpointing_*.
    if on:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()


#: AdamW's peak learning rate when none is given: LongRoPE's 2e-5 when every weight trains, and
#: 10× that with LoRA, which trains a fraction of a percent of them (LoRA's usual; the 8×
#: fine-tuned comparison in docs/results.md trained its adapters at it).
FULL_LEARNING_RATE, LORA_LEARNING_RATE = 2e-5, 2e-4


def default_learning_rate(lora: int | None) -> float:
    """The learning rate `finetune` uses when given none: `LORA_LEARNING_RATE` with a LoRA rank,
    else `FULL_LEARNING_RATE`."""
    return FULL_LEARNING_RATE if lora is None else LORA_LEARNING_RATE


def finetune(
    model: Any,
    samples: Sequence[torch.Tensor],
    scaling: RopeScaling | ShortLongScaling,
    *,
    steps: int,
    learning_rate: float | None = None,
    warmup_steps: int = 0,
    grad_accum: int = 1,
    autocast_dtype: str | None = "bfloat16",
    gradient_checkpointing: bool = True,
    max_grad_norm: float = 1.0,
    chunk_size: int = 2048,
    pose_tokens: int | None = None,
    target_length: int | None = None,
    short_share: float = 0.0,
    seed: int = 0,
    output_dir: str | Path | None = None,
    save_steps: int = 25,
    save_total_limit: int = 2,
    callbacks: Sequence[Any] | None = None,
    lora: int | None = None,
    progress: bool = True,
) -> FinetuneResult:
    """Train `model` in place for `steps` optimizer steps on `samples` with RoPE `scaling`.

    Rerun with the same arguments and `output_dir` after an interruption: it resumes from the
    last checkpoint there and reaches the weights an uninterrupted run reaches (every sample and
    its positions are fixed by ``(seed, index)``).

    Args:
        model: A transformers causal LM (fp32 weights: bf16 autocast keeps the matmuls fast and
            the AdamW updates exact).
        samples: 1-D token tensors, one document each, in training order (cycled).
        scaling: The factors to train with. A `ShortLongScaling` (original RoPE as `short`)
            trains short samples under `short` and PoSE samples under `long`.
        steps: Optimizer steps.
        learning_rate: AdamW peak learning rate, decayed linearly (default
            `default_learning_rate`: LongRoPE's 2e-5, or 2e-4 with `lora`).
        warmup_steps: Linear warm-up steps, then linear decay to 0.
        grad_accum: Sequences per optimizer step (per process under torchrun).
        autocast_dtype: ``"bfloat16"`` (default), ``"float16"``, or None for fp32.
        gradient_checkpointing: Recompute each decoder layer in backward.
        max_grad_norm: Gradient clipping norm.
        chunk_size: Positions per LM-head chunk.
        pose_tokens: Real tokens per sample (each sample's first), their positions spread over
            `target_length` (PoSE, `longrope_opt.training.pose_positions`). None: whole
            samples at contiguous positions.
        target_length: The length whose positions PoSE trains (default: the shortest
            sample's length); samples need only `pose_tokens` tokens.
        short_share: With `pose_tokens`: the share of samples that keep contiguous positions
            inside the trained window (LongRoPE2's mixed context windows).
        seed: Fixes every sample's positions and window (Trainer's own seed too).
        output_dir: Where checkpoints go (every `save_steps` steps, the last
            `save_total_limit` kept) and where a rerun resumes from. None: no checkpoints.
        save_steps: Steps between checkpoints: a kill loses at most this many.
        save_total_limit: Checkpoints kept (disk is bounded).
        callbacks: Trainer callbacks (`transformers.TrainerCallback`), e.g. to time steps.
        lora: Train LoRA adapters of this rank on the attention projections, norms in full
            (`longrope_opt.training.add_lora`), instead of every weight. The adapted model is
            `FinetuneResult.adapter`; `model` itself is wrapped in place until it is merged.
        progress: Trainer's progress bar.

    Returns:
        A `FinetuneResult` with the loss of every step.

    Raises:
        InvalidArgumentError: Bad step counts, learning rate, shares or samples.
        LongRopeOptError: The loss became NaN or infinite.
    """
    # on use: Trainer pulls in accelerate and the optimizers (seconds), which the commands that
    # only search or validate never need
    from transformers import TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    _check("steps", steps, 1)
    _check("grad_accum", grad_accum, 1)
    _check("warmup_steps", warmup_steps, 0)
    _check("save_steps", save_steps, 1)
    _check("save_total_limit", save_total_limit, 1)
    if learning_rate is None:
        learning_rate = default_learning_rate(lora)
    _check("learning_rate", learning_rate, 0.0, float)
    if not (isinstance(short_share, (int, float)) and 0.0 <= short_share < 1.0):
        raise InvalidArgumentError(f"`short_share` must be in [0, 1), got {short_share!r}.")
    if not samples:
        raise InvalidArgumentError("`samples` must hold at least one sample, got 0.")
    length = min(int(s.numel()) for s in samples)
    if length < 2:
        raise InvalidArgumentError("every sample must have at least 2 tokens.")
    target = length if target_length is None else target_length
    _check("target_length", target, 2)
    if pose_tokens is not None:
        _check("pose_tokens", pose_tokens, 4)
        if pose_tokens > length:
            raise InvalidArgumentError(
                f"`pose_tokens` must be <= the sample length {length}, got {pose_tokens}."
            )
        if pose_tokens > target:
            raise InvalidArgumentError(
                f"`pose_tokens` must be <= `target_length` {target}, got {pose_tokens}."
            )
    elif target != length:
        raise InvalidArgumentError("`target_length` needs `pose_tokens` (without PoSE a sample "
                                   "trains at its own positions).")  # fmt: skip
    elif short_share:
        raise InvalidArgumentError("`short_share` needs `pose_tokens` (mixed windows mix PoSE "
                                   "samples with short ones).")  # fmt: skip
    device = model.get_output_embeddings().weight.device
    adapter = None if lora is None else add_lora(model, lora)
    wrapper = ChunkedLoss(model if adapter is None else adapter, chunk_size=chunk_size)
    scratch = None
    if output_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="longrope-finetune-")
    out = Path(output_dir if output_dir is not None else scratch.name)  # type: ignore[union-attr]
    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=1,
        gradient_accumulation_steps=grad_accum, learning_rate=learning_rate,
        warmup_steps=warmup_steps, lr_scheduler_type="linear", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.95, max_grad_norm=max_grad_norm,
        bf16=autocast_dtype == "bfloat16", fp16=autocast_dtype == "float16",
        use_cpu=device.type == "cpu", seed=seed, logging_steps=1, report_to="none",
        save_strategy="no" if output_dir is None else "steps", save_steps=save_steps,
        save_total_limit=save_total_limit, remove_unused_columns=False,
        dataloader_num_workers=0, disable_tqdm=not progress,
        ddp_find_unused_parameters=False,  # every weight that trains is in every forward
    )  # fmt: skip
    data = PoseSamples(samples, tokens=pose_tokens or length, target=target,
                       items=steps * grad_accum * args.world_size, short_share=short_share,
                       seed=seed)  # fmt: skip
    trainer = _in_order_trainer(model=wrapper, args=args, train_dataset=data,
                                callbacks=list(callbacks or []), progress=progress)  # fmt: skip
    last = get_last_checkpoint(str(out)) if output_dir is not None and out.is_dir() else None
    if last is not None:
        logger.info("resuming fine-tuning from %s", last)
    was_training = model.training
    if gradient_checkpointing:
        _checkpointing(model, True)
    result = FinetuneResult(resumed_from=last, adapter=adapter)
    start = time.perf_counter()
    try:
        with apply_rope_scaling(model, scaling):
            trainer.train(resume_from_checkpoint=last)
    finally:
        if gradient_checkpointing:
            _checkpointing(model, False)
        model.train(was_training)
        result.seconds = time.perf_counter() - start
        if scratch is not None:
            scratch.cleanup()
    result.losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    if last is not None:  # the steps before the resume: every item holds `data.tokens` ids
        state = json.loads((Path(last) / "trainer_state.json").read_text())
        result.resumed_step = int(state["global_step"])
    before = result.resumed_step * grad_accum * args.world_size * (data.tokens - 1)
    result.tokens = before + wrapper.tokens * args.world_size  # every process trains as many
    return result


def _trained(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train, by their state-dict names (contiguous, for safetensors)."""
    return {n: p.detach().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def _in_order_trainer(*, progress: bool, **kwargs: Any) -> Any:
    """Trainer whose sampler walks the items in order: the items carry their own shuffling
    (`PoseSamples`), so a resume that skips the first k batches and a process taking every
    N-th batch see exactly the items one uninterrupted process sees. Its logs reach no stdout
    (library code does not print): the progress bar shows the step's loss instead."""
    # on use, as in `finetune`: Trainer pulls in accelerate and the optimizers
    import safetensors.torch
    from transformers import Trainer
    from transformers.trainer import TRAINING_ARGS_NAME
    from transformers.trainer_callback import PrinterCallback
    from transformers.trainer_callback import ProgressCallback
    from transformers.utils import SAFE_WEIGHTS_NAME

    class InOrderTrainer(Trainer):
        def _get_train_sampler(self, *args: Any, **kw: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)  # type: ignore[arg-type]

        def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
            # Trainer saves a module that is no PreTrainedModel (our loss wrapper) with
            # safetensors' save_file, which refuses tensors shared by two names: a model that
            # ties its embeddings to its LM head (SmolLM2) could not checkpoint. save_model
            # keeps one name of each; a resume loads non-strictly into the tied parameter.
            if state_dict is not None or not self.args.should_save:
                return super()._save(output_dir, state_dict)
            folder = Path(output_dir or str(self.args.output_dir))
            folder.mkdir(parents=True, exist_ok=True)
            assert self.model is not None
            target = str(folder / SAFE_WEIGHTS_NAME)
            trained = _trained(self.model)
            if len(trained) < sum(1 for _ in self.model.parameters()):
                # frozen weights (LoRA) are the base model's, which the resuming command loads
                # again: a checkpoint of what trains is MBs (an adapter and its moments), not GBs
                safetensors.torch.save_file(trained, target, metadata={"format": "pt"})
            else:
                safetensors.torch.save_model(self.model, target, metadata={"format": "pt"})
            torch.save(self.args, folder / TRAINING_ARGS_NAME)

        def _issue_warnings_after_load(self, load_result: Any) -> None:
            # the names save_model dropped are other names of loaded tensors (tied weights);
            # any other key missing or unexpected would resume from other weights: an error
            # (and a checkpoint of what trains leaves out the frozen weights: the base model's)
            names: dict[int, list[str]] = {}
            assert self.model is not None
            for key, value in self.model.state_dict().items():
                names.setdefault(value.data_ptr(), []).append(key)
            tied = {k for group in names.values() if len(group) > 1 for k in group}
            trained = _trained(self.model)
            lost = [k for k in load_result.missing_keys if k not in tied and k in trained]
            if lost or load_result.unexpected_keys:
                raise LongRopeOptError(
                    f"the checkpoint does not hold this model's weights (missing {lost[:3]}, "
                    f"unexpected {list(load_result.unexpected_keys)[:3]}): another model or "
                    "LoRA setting trained it; give another checkpoint folder."
                )

    class LossBar(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            bar = getattr(self, "training_bar", None)
            if state.is_world_process_zero and bar is not None and logs and "loss" in logs:
                bar.set_postfix(loss=f"{float(logs['loss']):.4f}")

    trainer = InOrderTrainer(**kwargs)
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if progress:
        trainer.add_callback(LossBar)
    return trainer
