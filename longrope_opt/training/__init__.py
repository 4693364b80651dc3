"""Fine-tuning with searched factors (the method's second half): PoSE samples and mixed context
windows on transformers' `Trainer`, resumable from its checkpoints."""

from __future__ import annotations

from longrope_opt.training._finetune import FULL_LEARNING_RATE
from longrope_opt.training._finetune import LORA_LEARNING_RATE
from longrope_opt.training._finetune import ChunkedLoss
from longrope_opt.training._finetune import FinetuneResult
from longrope_opt.training._finetune import default_learning_rate
from longrope_opt.training._finetune import finetune
from longrope_opt.training._lora import add_lora
from longrope_opt.training._pose import SHORT_SHARE
from longrope_opt.training._pose import PoseSamples
from longrope_opt.training._pose import pose_positions


__all__ = ["FULL_LEARNING_RATE", "LORA_LEARNING_RATE", "SHORT_SHARE", "ChunkedLoss", "FinetuneResult", "PoseSamples", "add_lora", "default_learning_rate", "finetune", "pose_positions"]
