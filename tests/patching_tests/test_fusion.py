"""`fuse_elementwise`: compiled norms/MLPs give the same logits, and patching still applies."""

from __future__ import annotations

import numpy as np
import torch

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.patching import apply_rope_scaling
from longrope_opt.patching import fuse_elementwise
from longrope_opt.patching import is_fused
from longrope_opt.patching import unfuse_elementwise
from tests.conftest import build_tiny_model


def test_fused_model_matches_eager_and_still_patches() -> None:
    model = build_tiny_model("llama")
    spec = RopeSpec.from_config(model.config)
    ids = torch.randint(3, 128, (1, 96), generator=torch.Generator().manual_seed(0))
    scaling = RopeScaling(np.linspace(1.0, 2.0, spec.n_factors), 2, 1.1)
    with torch.no_grad():
        eager = model(ids).logits
        with apply_rope_scaling(model, scaling):
            eager_scaled = model(ids).logits
        fuse_elementwise(model)
        assert is_fused(model)
        fused = model(ids).logits
        with apply_rope_scaling(model, scaling):
            fused_scaled = model(ids).logits
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_scaled, eager_scaled, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(fused_scaled, fused, atol=1e-4)
    unfuse_elementwise(model)
    assert not is_fused(model)
    assert all(
        "forward" not in m.__dict__ for m in model.modules() if "Rotary" not in type(m).__name__
    )
