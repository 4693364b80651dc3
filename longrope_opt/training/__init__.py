"""Fine-tuning with searched factors (the middle step of LongRoPE's progressive extension)."""

from __future__ import annotations

from longrope_opt.training._finetune import FinetuneResult
from longrope_opt.training._finetune import finetune


__all__ = ["FinetuneResult", "finetune"]
