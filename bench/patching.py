"""Cost of switching candidates: one `apply_rope_scaling` enter+exit vs one forward pass.

Prints ratios measured in this process (no absolute targets). Run: ``python bench/patching.py``.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import transformers

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.patching import apply_rope_scaling


CONFIGS = {
    "llama": transformers.LlamaConfig,
    "mistral": transformers.MistralConfig,
    "qwen2": transformers.Qwen2Config,
    "phi3": transformers.Phi3Config,
}


def tiny_model(family: str) -> torch.nn.Module:
    """A random 2-layer, hidden-64 model of `family` (Phi-3 rotating half of each head)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    extra = {}
    if family == "phi3":
        rope["partial_rotary_factor"] = 0.5
        extra["original_max_position_embeddings"] = 64
    config = CONFIGS[family](
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=2, vocab_size=128, max_position_embeddings=64, rope_parameters=rope,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
        **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    torch.set_num_threads(2)
    rows = []
    for family in ["llama", "mistral", "qwen2", "phi3"]:
        model = tiny_model(family)
        spec = RopeSpec.from_config(model.config)
        scalings = [RopeScaling(np.full(spec.n_factors, 1.0 + i / 100)) for i in range(10)]
        ids = torch.randint(3, 128, (1, 2048))

        def forward() -> None:
            with torch.inference_mode():
                model(ids)

        def repatch_1000() -> None:
            for i in range(1000):
                with apply_rope_scaling(model, scalings[i % 10], spec=spec):
                    pass

        forward()
        t_fwd = best_of(forward)
        t_patch = best_of(repatch_1000, 3) / 1000
        rows.append((family, t_fwd * 1e3, t_patch * 1e6, 100 * t_patch / t_fwd))
    print(f"{'family':8} {'fwd 2k (ms)':>12} {'re-patch (us)':>14} {'re-patch / fwd':>15}")
    for family, fwd_ms, patch_us, pct in rows:
        print(f"{family:8} {fwd_ms:12.2f} {patch_us:14.1f} {pct:14.3f}%")


if __name__ == "__main__":
    main()
