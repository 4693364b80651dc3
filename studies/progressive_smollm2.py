"""LongRoPE's progressive recipe end to end, at CPU scale, with the public API only.

    python studies/progressive_smollm2.py --workdir progressive          # ≈ 40 min on 2 cores
    python studies/progressive_smollm2.py --workdir p --trials 64 --finetune-steps 40 --full-length

Stages (LongRoPE §3.3), each a resumable Optuna study in ``<workdir>/progressive.db``:
  1. search 16k factors on the base model;
  2. fine-tune with them at 16k (PoSE pieces by default; ``--full-length`` for whole 16k
     sequences), saved as a model directory whose config carries the factors;
  3. search 32k factors *on the fine-tuned model*, relative to its 16k factors (composed);
  4. recover short-context quality: short factors searched at 8k (λ ≤ --short-cap, with the
     long factors' attention scale, since transformers' longrope has one);
  5. export the short/long pair and load it back with vanilla transformers.
Perplexity at 8k/16k/32k is measured before and after each stage, on documents the searches and
the fine-tuning did not use, and written to ``<workdir>/table.md`` and ``table.json`` (rerunning
with the same workdir resumes: finished studies, the fine-tuned model and measured rows are kept).
Every row applies its factors at every length (the long factors at 8k too), except the short/long
rows, which switch as transformers does. n̂ is fixed to 0 by default
so the export loads in vanilla transformers (``--n-hat search`` searches it; the export then
needs ``longrope_opt.models.load_model``).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

import optuna
import torch

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.data import load_samples
from longrope_opt.files import write_text_atomic
from longrope_opt.models import export_model
from longrope_opt.models import load_model
from longrope_opt.objectives import evaluate_perplexity
from longrope_opt.rope import ShortLongScaling
from longrope_opt.rope import none
from longrope_opt.rope import yarn
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import best_scaling
from longrope_opt.studies import run_search
from longrope_opt.training import finetune


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workdir", default="progressive", help="studies, models and tables go here")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--corpus", default="builtin")
    p.add_argument("--first-length", type=int, default=16384, help="stage-1 length (16k)")
    p.add_argument("--second-length", type=int, default=32768, help="stage-2 length (32k)")
    p.add_argument("--short-length", type=int, default=8192, help="recovery length (<= trained)")
    p.add_argument("--short-cap", type=float, default=1.25, help="largest short factor (1.25)")
    p.add_argument("--trials", type=int, default=24, help="trials per long search (24)")
    p.add_argument(
        "--short-trials", type=int, default=16, help="trials of the recovery search (16)"
    )
    p.add_argument("--search-mode", default="skip", choices=["skip", "truncate"],
                   help="long searches: skip proxy (8 x 512 tokens spread over L', ≈ 4 s) or truncate")  # fmt: skip
    p.add_argument("--search-samples", type=int, default=8)
    p.add_argument("--n-hat", default="0", help="'0' (default: vanilla-loadable) or 'search'")
    p.add_argument("--finetune-steps", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=5e-5)
    p.add_argument("--pose-tokens", type=int, default=4096, help="real tokens per PoSE step")
    p.add_argument("--full-length", action="store_true", help="fine-tune on whole sequences")
    p.add_argument("--eval-lengths", default="8192,16384,32768")
    p.add_argument("--eval-seed", type=int, default=1, help="documents for the table (1)")
    p.add_argument("--seed", type=int, default=0, help="search documents and sampler seed (0)")
    p.add_argument("--no-controls", action="store_true", help="skip the three control rows")
    p.add_argument("--no-two-scales", action="store_true",
                   help="skip the recovery variant with t = 1 for short inputs (needs our loader)")  # fmt: skip
    return p.parse_args()


class Table:
    """Perplexity rows, saved after every row so an interrupted run keeps what it measured."""

    def __init__(
        self, workdir: Path, lengths: list[int], corpus: str, tokenizer, seed: int
    ) -> None:
        self.path = workdir / "table.json"
        self.lengths = lengths
        # One document per length, chosen by `seed`; training and search never see them.
        self.samples = {n: load_samples(corpus, tokenizer, n, 1, seed) for n in lengths}
        self.doc_ids = {d for s in self.samples.values() for d in s.doc_ids}
        self.rows: dict[str, dict[str, float]] = (
            json.loads(self.path.read_text()) if self.path.exists() else {}
        )

    def measure(self, label: str, model, scaling) -> None:
        row = self.rows.setdefault(label, {})
        for length in self.lengths:
            if str(length) in row:
                continue
            samples = self.samples[length]
            start = time.perf_counter()
            ppl = evaluate_perplexity(model, samples, scaling).ppl
            row[str(length)] = ppl
            print(
                f"  {label:<44} {length:>6}: {ppl:9.3f}  ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
            write_text_atomic(self.path, json.dumps(self.rows, indent=2))

    def markdown(self) -> str:
        head = "| stage | " + " | ".join(f"{n // 1024}k" for n in self.lengths) + " |"
        sep = "|---|" + "---:|" * len(self.lengths)
        lines = [head, sep]
        # Stages in pipeline order, then the variants and controls (a resumed run may have
        # measured them in another order).
        order = ("base", "stage 1", "fine-tuned", "stage 2", "stage 3:", "exported,", "stage 3b",
                 "exported 3b", "control")  # fmt: skip
        rank = {label: next((i for i, p in enumerate(order) if label.startswith(p)), len(order))
                for label in self.rows}  # fmt: skip
        for label, row in sorted(self.rows.items(), key=lambda kv: rank[kv[0]]):
            cells = " | ".join(f"{row.get(str(n), float('nan')):.3f}" for n in self.lengths)
            lines.append(f"| {label} | {cells} |")
        return "\n".join(lines) + "\n"


def search(storage: str, name: str, config: SearchConfig, model, tokenizer,
           n_trials: int) -> RopeScaling:  # fmt: skip
    """Run (or resume) one search to `n_trials` finished trials; return its best absolute factors."""
    result = run_search(config, storage=storage, study_name=name, n_trials=n_trials,
                        model=model, tokenizer=tokenizer)  # fmt: skip
    study = result.study
    seeds = {t.user_attrs["seed"]: t.value for t in study.trials if t.user_attrs.get("seed")}
    print(f"  {name}: best {study.best_value:.4f} (trial {study.best_trial.number}); seeds "
          + ", ".join(f"{k} {v:.4f}" for k, v in seeds.items())
          + f"; {result.seconds:.0f} s", flush=True)  # fmt: skip
    return best_scaling(study)[0]


def main() -> None:
    args = parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{work / 'progressive.db'}"
    lengths = [int(x) for x in args.eval_lengths.split(",")]
    L1, L2 = args.first_length, args.second_length
    factors_path = work / "factors.json"
    factors = json.loads(factors_path.read_text()) if factors_path.exists() else {}

    def save(key: str, value) -> None:
        factors[key] = value.to_dict() if isinstance(value, RopeScaling) else value
        factors_path.write_text(json.dumps(factors, indent=2))

    print("[1/5] stage 1: search on the base model", flush=True)
    model, tokenizer = load_model(args.model)
    spec = RopeSpec.from_config(model.config)
    table = Table(work, lengths, args.corpus, tokenizer, args.eval_seed)
    print(f"  table documents: {sorted(table.doc_ids)} (held out of search and training)")
    table.measure("base model, no scaling", model, none(spec))

    def search_config(length: int, **space) -> SearchConfig:
        # The skip proxy reads 512 real tokens per document (positions spread over `length`),
        # so any document of a few thousand tokens serves; truncate needs whole-length ones.
        skip = args.search_mode == "skip" and length > spec.original_length
        return SearchConfig(
            model=args.model, corpus=args.corpus, seed=args.seed, target_length=length,
            samples=args.search_samples if length > spec.original_length else 1,
            sampler_options=dict(population_size=8, num_mutations=4, num_crossovers=4,
                                 num_parents=4),
            objective_options={"mode": args.search_mode if skip else "truncate",
                               "skip_tokens": 512},
            sample_length=min(length, 4096) if skip else None,
            exclude_docs=sorted(table.doc_ids), **{"n_hat": args.n_hat, **space},
        )  # fmt: skip

    stage1 = search(storage, f"stage1-{L1}", search_config(L1), model, tokenizer, args.trials)
    save("stage1", stage1)
    table.measure(f"stage 1: {L1 // 1024}k factors, base model", model, stage1)
    del model
    gc.collect()

    ft_dir = work / f"finetuned-{L1}"
    print(f"[2/5] fine-tune with the stage-1 factors at {L1} -> {ft_dir}", flush=True)
    if not (ft_dir / "config.json").exists():
        model, tokenizer = load_model(args.model, dtype="float32")
        train = load_samples(args.corpus, tokenizer, L1, args.finetune_steps, args.seed + 100,
                             exclude=table.doc_ids)  # fmt: skip
        result = finetune(
            model, list(train), stage1, steps=args.finetune_steps, learning_rate=args.learning_rate,
            pose_tokens=None if args.full_length else args.pose_tokens, seed=args.seed,
        )  # fmt: skip
        print(
            f"  losses {[round(x, 4) for x in result.losses]}, {result.tokens} tokens, {result.seconds:.0f} s"
        )
        save(
            "finetune",
            {"losses": result.losses, "tokens": result.tokens, "seconds": result.seconds},
        )
        export_model(model, tokenizer, ft_dir, stage1, target_length=L1, dtype="bfloat16")
        del model
        gc.collect()
    model, tokenizer = load_model(str(ft_dir))
    table.measure(f"fine-tuned, stage-1 {L1 // 1024}k factors", model, stage1)

    print(
        f"[3/5] stage 2: search {L2} on the fine-tuned model, relative to its factors", flush=True
    )
    # Relative to the fine-tuned model's own (stage-1) factors, read from its config.
    stage2 = search(storage, f"stage2-{L2}", search_config(L2, model=str(ft_dir), base="config"),
                    model, tokenizer, args.trials)  # fmt: skip
    save("stage2", stage2)
    table.measure(f"stage 2: {L2 // 1024}k factors, fine-tuned model", model, stage2)

    print(
        f"[4/5] recovery: short factors at {args.short_length} (cap {args.short_cap})", flush=True
    )

    def recovery_config(t: float) -> SearchConfig:
        return search_config(args.short_length, model=str(ft_dir), recovery=True,
                             lambda_max=args.short_cap, n_hat=0, attention=repr(t))  # fmt: skip

    short = search(storage, f"short-{args.short_length}",
                   recovery_config(stage2.attention_scale), model, tokenizer, args.short_trials)  # fmt: skip
    save("short", short)
    pair = ShortLongScaling(short, stage2, spec.original_length)
    table.measure("stage 3: short + long factors, fine-tuned", model, pair)

    out = work / f"exported-{L2}"
    print(f"[5/5] export -> {out}; evaluate it as loaded", flush=True)
    export_model(model, tokenizer, out, pair, target_length=L2)
    del model
    gc.collect()
    if pair.n_hat == 0:
        from transformers import AutoModelForCausalLM

        exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
        label = "exported, vanilla transformers from_pretrained"
    else:
        exported, _ = load_model(str(out))
        label = "exported, longrope_opt load_model (n_hat > 0)"
    table.measure(label, exported, None)
    del exported
    gc.collect()
    if not args.no_two_scales:
        # transformers' longrope has one attention factor, so the short factors above run with the
        # long factors' t. With t = 1 for short inputs the export needs longrope_opt's loader.
        print("[5b] recovery with t = 1 for short inputs (two attention scales)", flush=True)
        model, tokenizer = load_model(str(ft_dir))
        short1 = search(storage, f"short-{args.short_length}-t1", recovery_config(1.0),
                        model, tokenizer, args.short_trials)  # fmt: skip
        save("short_t1", short1)
        pair1 = ShortLongScaling(short1, stage2, spec.original_length)
        table.measure("stage 3b: short factors with t = 1, fine-tuned", model, pair1)
        out_b = work / f"exported-{L2}-two-scales"
        export_model(model, tokenizer, out_b, pair1, target_length=L2)
        del model
        gc.collect()
        loaded, _ = load_model(str(out_b))
        table.measure("exported 3b, longrope_opt load_model", loaded, None)
        del loaded
        gc.collect()
    if not args.no_controls:
        # What each gain is made of: fine-tuning on this corpus also adapts the model to its
        # domain (seen at 8k too), and the stage-2 factors may work without the fine-tune.
        print("[controls] fine-tuned without scaling; stage-2 factors and YaRN on the base model")
        model, _ = load_model(str(ft_dir))
        table.measure("control: fine-tuned model, no scaling", model, none(spec))
        del model
        gc.collect()
        model, _ = load_model(args.model)
        table.measure(f"control: base model, stage-2 {L2 // 1024}k factors", model, stage2)
        table.measure(f"control: base model, YaRN {L2 // 1024}k", model, yarn(spec, L2))
    (work / "table.md").write_text(table.markdown())
    print("\n" + table.markdown())


if __name__ == "__main__":
    main()
