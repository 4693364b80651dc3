"""Patching: the only code that touches transformers internals.

`apply_rope_scaling(model, scaling)` is a context manager that makes a loaded model use a
`RopeScaling` (λ, n̂, t) and restores it exactly on exit.
"""

from __future__ import annotations

from longrope_opt.patching._apply import apply_rope_scaling
from longrope_opt.patching._apply import composed_inv_freq
from longrope_opt.patching._apply import install_rope_scaling
from longrope_opt.patching._attention import ATTENTION_IMPLEMENTATIONS
from longrope_opt.patching._attention import SDPA_FP32
from longrope_opt.patching._attention import attention_of
from longrope_opt.patching._attention import set_attention
from longrope_opt.patching._banded import BANDED
from longrope_opt.patching._banded import BANDED_FP32
from longrope_opt.patching._banded import SlidingBand
from longrope_opt.patching._banded import band_attention
from longrope_opt.patching._banded import band_cost
from longrope_opt.patching._banded import banded_for
from longrope_opt.patching._banded import sliding_window_of
from longrope_opt.patching._checked import CHECKED
from longrope_opt.patching._checked import CHECKED_WITH
from longrope_opt.patching._compat import find_rotary_modules
from longrope_opt.patching._compat import keep_rope_fp32
from longrope_opt.patching._compat import restore_rope_fp32
from longrope_opt.patching._compile import fuse_elementwise
from longrope_opt.patching._compile import is_fused
from longrope_opt.patching._compile import unfuse_elementwise
from longrope_opt.patching._families import REFUSED
from longrope_opt.patching._families import check_supported
from longrope_opt.patching._prefix import PREFIX_ATTENTION
from longrope_opt.patching._prefix import SharedPrefix
from longrope_opt.patching._prefix import can_share_prefix
from longrope_opt.patching._prefix import shared_prefix
from longrope_opt.patching._resume import LayerState
from longrope_opt.patching._resume import resumable_forward


__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "SDPA_FP32",
    "attention_of",
    "set_attention",
    "BANDED",
    "BANDED_FP32",
    "SlidingBand",
    "band_attention",
    "band_cost",
    "banded_for",
    "sliding_window_of",
    "CHECKED",
    "CHECKED_WITH",
    "REFUSED",
    "apply_rope_scaling",
    "check_supported",
    "composed_inv_freq",
    "keep_rope_fp32",
    "restore_rope_fp32",
    "find_rotary_modules",
    "install_rope_scaling",
    "fuse_elementwise",
    "is_fused",
    "unfuse_elementwise",
    "resumable_forward",
    "PREFIX_ATTENTION",
    "SharedPrefix",
    "LayerState",
    "can_share_prefix",
    "shared_prefix",
]
