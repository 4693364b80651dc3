"""The exported GGUF of SmolLM2 in llama.cpp against our patched transformers model, on real text.

On one held-out window of `--length` tokens: the perplexity of the study's winner in our patched
transformers model and in llama.cpp (llama-cpp-python) on the exported GGUF; the source GGUF at
the same length without the factors; llama.cpp's own YaRN against our YaRN row; and the cost of
the long factors on short prompts (4k and 8k, within the trained window), which llama.cpp applies
whenever the context is set past the trained length. Each measurement is stored as it is made
(`--out`, JSON), so a rerun continues.

    python experiments/gguf_check.py --held-out /path/to/books --out experiments/results/gguf-check.json
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _nll_ours(model: Any, ids: list[int], scaling: Any) -> float:
    from longrope_opt.models import chunked_nll
    from longrope_opt.models import decoder_hidden
    from longrope_opt.patching import apply_rope_scaling

    tokens = torch.tensor(ids)
    with torch.inference_mode(), apply_rope_scaling(model, scaling):
        hidden = decoder_hidden(model, tokens[:-1])
        total, _ = chunked_nll(model, hidden, tokens[1:])
    return float(total.sum()) / (len(ids) - 1)


def _nll_llama_cpp(path: Path, ids: list[int], n_ctx: int, **rope: Any) -> float:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=2048, n_ubatch=512,
                          logits_all=True, n_threads=2, verbose=False, **rope)  # fmt: skip
    try:
        llm.eval(ids)
        total = 0.0
        for start in range(0, len(ids) - 1, 2048):  # log-softmax a slice at a time
            rows = np.asarray(llm.scores[start : min(start + 2048, len(ids) - 1)], np.float64)
            top = rows.max(axis=1, keepdims=True)
            lse = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
            targets = ids[start + 1 : start + 1 + len(rows)]
            total += float((lse - rows[np.arange(len(rows)), targets]).sum())
        return total / (len(ids) - 1)
    finally:
        llm.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", default="sqlite:///bench/results/compare-real-16k.db")
    p.add_argument("--study-name", default="real16k/longrope/seed0")
    p.add_argument("--held-out", required=True, help="text no study read (a folder of books)")
    p.add_argument("--seed", type=int, default=0, help="chooses the document")
    p.add_argument("--out", default="experiments/results/gguf-check.json")
    args = p.parse_args()

    import optuna

    from longrope_opt import RopeSpec
    from longrope_opt.data import load_samples
    from longrope_opt.models import cpu_name
    from longrope_opt.models import export_gguf
    from longrope_opt.models import gguf_source
    from longrope_opt.models import load_model
    from longrope_opt.rope import yarn
    from longrope_opt.studies import record
    from longrope_opt.studies import study_winner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=args.study_name, storage=args.storage)
    length = int(record.target_length(study))
    winner = study_winner(study).scaling
    out = Path(args.out)
    done: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    model, tok = load_model("smollm2-135m", dtype="float32", device="cpu", fuse=False)
    spec = RopeSpec.from_config(model.config)
    (ids,) = [s.tolist() for s in load_samples(args.held_out, tok, length, 1, seed=args.seed)]
    source = gguf_source("smollm2-135m")
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_gguf(source, Path(tmp) / "x.gguf", winner, spec=spec,
                               target_length=length).path  # fmt: skip
        yarn_rope = {"rope_scaling_type": 2, "rope_freq_scale": spec.original_length / length,
                     "yarn_orig_ctx": spec.original_length}  # fmt: skip
        short = {n: ids[:n] for n in (4096, 8192)}
        runs = {
            "ours searched": lambda: _nll_ours(model, ids, winner),
            "llama.cpp searched": lambda: _nll_llama_cpp(exported, ids, length),
            "llama.cpp without factors": lambda: _nll_llama_cpp(source, ids, length),
            "ours yarn": lambda: _nll_ours(model, ids, yarn(spec, length)),
            "llama.cpp yarn": lambda: _nll_llama_cpp(source, ids, length, **yarn_rope),
            **{f"llama.cpp original {n}": (lambda n=n: _nll_llama_cpp(source, short[n], n))
               for n in short},
            **{f"llama.cpp searched {n}, context {length}":
               (lambda n=n: _nll_llama_cpp(exported, short[n], length)) for n in short},
        }  # fmt: skip
        for name, run in runs.items():
            if name in done:
                continue
            start = time.perf_counter()
            nll = run()
            done[name] = {"nll": nll, "ppl": math.exp(nll), "seconds": time.perf_counter() - start}
            done["_about"] = (f"{cpu_name()}; study {args.study_name}; {length} tokens of "
                              f"{args.held_out} (seed {args.seed}); n_hat {winner.n_hat}")  # fmt: skip
            out.write_text(json.dumps(done, indent=2) + "\n")
            print(f"{name:40s} ppl {done[name]['ppl']:9.4f}  ({done[name]['seconds']:.0f} s)",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
