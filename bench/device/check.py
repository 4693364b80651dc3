"""The device run: CUDA against the CPU, speed and memory to 128k, an 8B-shaped model, a 4x search.

    python -m bench.device.check --out DIR                 # run A (the path), ≈ 4 min on an H100
    python -m bench.device.check --out DIR --runs b        # run B (4x, 8x, 16x extends)
    python -m bench.device.check --out DIR --runs b,a      # the searches first, then run A
    python -m bench.device.check --out DIR --runs correctness,b,speed   # the GPU sitting's order
    python -m bench.device.check --out DIR --runs a --only speed,8b
    python -m bench.device.check --out DIR --runs correctness,g   # Gemma 3 at 8x (pack.py --gemma)
    python -m bench.device.check --out DIR --runs correctness,f   # the 8x full fine-tunes (--train)

`bench/device/entry.sh` calls this on the GPU machine after installing the kit. Before it looks
for CUDA it imports everything the run needs and loads the default model on the CPU, so a CPU dry
run proves the kit and stops at one line: "device check: no CUDA ...", exit 2.

Run A:
  correctness  perplexity on CUDA (bf16 and fp32, SDPA) against this project's CPU fp32
               references (bench/device/cpu_reference.json) within 1 % at 4k and 16k for none,
               YaRN and a searched vector; passkeys must find the same keys.
  speed        tokens/s and peak GPU memory of one forward with the chunked loss (bf16) at 16k,
               32k, 64k and 128k, patched (YaRN) against the same forward unpatched, and the
               attention kernel used.
  8b           a Llama-3.1-8B-shaped model from its config with random weights (no download):
               the patched forward with the chunked loss at 32k and 128k, or the longest that fits.
Run B (`bench/device/searches.py`): `longrope-opt extend smollm2-135m` to 32k, 64k and 128k on
the GPU, 4x first, each sized to its --budget-b, validated on --held-out (the prose the kit
carried, pack.py --held-out) against every classic row; each ratio comes back as
extend-<r>x.tar.gz as soon as it is done. Run C: the 4x fine-tunes (searched factors, YaRN-cd)
and their validation at 32k and 64k, as run-c.tar.gz. Run G: Gemma 3 270M searched at 8× (256k)
for --budget-g seconds on the built-in code, then validated on the kit's books against every
classic row, as gemma3-8x.tar.gz (its GGUF is carried by a kit packed with --gemma). Run F
(`bench/device/finetunes.py`): the 8x full fine-tunes of `experiments/finetune_8x.sh` (searched,
YaRN-cd, PI) on --train-text (Perl's manual, carried by pack.py --train), each judged at 64k beside
the rows before fine-tuning and at 4k against the base, as run-f.tar.gz.

Writes DIR/table.txt (what it prints), DIR/results.json and DIR/check.log. Exits 0 when every
check passes, 1 when one fails, 2 with no CUDA.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench.device.cases import REFERENCE
from bench.device.cases import ROOT
from bench.device.cases import TOLERANCE
from bench.device.cases import cases
from bench.device.cases import key
from bench.device.cases import measure
from bench.device.finetunes import run_f
from bench.device.searches import B_BUDGETS
from bench.device.searches import B_LENGTHS
from bench.device.searches import G_SEARCH_S
from bench.device.searches import run_b
from bench.device.searches import run_c
from bench.device.searches import run_g


SPEED_LENGTHS = (16384, 32768, 65536, 131072)
BIG_LENGTHS = (32768, 131072)
#: Llama-3.1-8B's shape (its config.json), weights drawn at random on the GPU.
LLAMA_8B = dict(
    hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
    rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
)  # fmt: skip


#: Run A's parts, in their default order.
A_PARTS = ("correctness", "speed", "8b")
#: Seconds kept at the end of --stop-after for packing and writing what the parts left.
PACK_S = 20.0


class Report:
    """Lines for table.txt and records for results.json, printed as they come."""

    def __init__(self, out: Path) -> None:
        self.out, self.failed = out, 0
        self.lines: list[str] = []
        self.records: dict[str, Any] = {}

    def line(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)
        (self.out / "table.txt").write_text("\n".join(self.lines) + "\n")

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.failed += not ok
        self.line(f"{'PASS' if ok else 'FAIL'}  {name:<34} {detail}")

    def record(self, name: str, value: Any) -> None:
        self.records[name] = value
        (self.out / "results.json").write_text(json.dumps(self.records, indent=1) + "\n")


def prepare(report: Report) -> tuple[Any, dict[str, Any]]:
    """Import what every run needs and load the default model on the CPU (the dry run's proof)."""
    import importlib
    import importlib.metadata

    import longrope_opt.cli  # noqa: F401  (run B's command, imported here so a CPU run checks it)
    from longrope_opt.models import load_model

    modules = ["torch", "transformers", "accelerate", "optuna", "sqlalchemy", "alembic", "gguf",
               "plotly"]
    versions = {m: importlib.metadata.version(m) for m in modules}
    report.record("versions", versions)
    report.record("imported_from", {m: importlib.import_module(m).__file__ for m in modules})
    model, _ = load_model("smollm2-135m", device="cpu", dtype="float32", fuse=False)
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.is_file() else {"results": {}}
    report.line(f"installed: {', '.join(f'{k} {v}' for k, v in versions.items())}; "
                f"SmolLM2-135M loaded on the CPU ({sum(p.numel() for p in model.parameters()):,} "
                f"parameters); {len(reference['results'])} CPU references")  # fmt: skip
    return model, reference


def gemma_staged(report: Report) -> bool:
    """Whether the Gemma 3 GGUF and converted tokenizer the kit carried lie where the
    `gemma3-270m` alias looks for them (run G's first use then de-quantizes the weights and reads
    the tokenizer: the image's transformers converts that one wrong); the GGUF's header is read,
    so a damaged one fails before CUDA."""
    from gguf import GGUFReader

    from longrope_opt.models import ALIASES
    from longrope_opt.models import alias_tokenizer_dir
    from longrope_opt.models import cache_dir

    alias = ALIASES["gemma3-270m"]
    path = cache_dir() / f"{alias.name}-gguf" / alias.gguf_name
    tokenizer = alias_tokenizer_dir(alias.name) / "tokenizer_config.json"
    for needed in (path, tokenizer):
        if not needed.is_file():
            report.check("gemma3-270m staged", False, f"no {needed}: pack the kit with --gemma")
            return False
    reader = GGUFReader(path)
    field = reader.fields["general.architecture"]
    arch = bytes(field.parts[field.data[0]]).decode()
    report.check("gemma3-270m staged", arch == "gemma3",
                 f"{path.name}: architecture {arch}, {len(reader.tensors)} tensors, "
                 f"{path.stat().st_size / 2**20:.1f} MiB")  # fmt: skip
    return arch == "gemma3"


def correctness(report: Report, reference: dict[str, Any]) -> None:
    import torch

    from longrope_opt.models import load_model

    for dtype in ("bfloat16", "float32"):
        model, tokenizer = load_model("smollm2-135m", device="cuda", dtype=dtype, attn="sdpa")
        for kind, method, length in cases():
            name = key(kind, method, length)
            got = measure(model, tokenizer, kind, method, length)
            report.record(f"{dtype}/{name}", got)
            ref = reference["results"].get(name)
            if ref is None:
                report.check(f"{dtype} {name}", False, "no CPU reference (run cpu_reference)")
            elif kind == "ppl":
                rel = got["ppl"] / ref["ppl"] - 1
                report.check(f"{dtype} {name}", abs(rel) <= TOLERANCE,
                             f"{got['ppl']:.4f} vs CPU fp32 {ref['ppl']:.4f} ({100 * rel:+.2f} %)")  # fmt: skip
            else:
                report.check(f"{dtype} {name}", got["correct"] == ref["correct"],
                             f"found {got['correct']} vs CPU {ref['correct']}")  # fmt: skip
        del model
        torch.cuda.empty_cache()


def timed(model: Any, ids: Any, scaling: Any) -> tuple[float, float]:
    """(seconds, peak GiB) of one chunked-loss forward after a warm-up (peak: NaN off CUDA)."""
    import torch

    from longrope_opt.objectives import evaluate_perplexity

    cuda = model.device.type == "cuda"
    evaluate_perplexity(model, [ids], scaling)  # warm-up: kernels chosen, caches built
    if cuda:
        torch.cuda.synchronize(model.device)
        torch.cuda.reset_peak_memory_stats(model.device)
    start = time.perf_counter()
    evaluate_perplexity(model, [ids], scaling)
    if not cuda:
        return time.perf_counter() - start, float("nan")
    torch.cuda.synchronize(model.device)
    return time.perf_counter() - start, torch.cuda.max_memory_allocated(model.device) / 2**30


def speed(
    report: Report, *, model_name: str = "smollm2-135m", device: str = "cuda",
    lengths: tuple[int, ...] = SPEED_LENGTHS,
) -> None:  # fmt: skip
    import torch

    from longrope_opt import RopeSpec
    from longrope_opt.models import load_model
    from longrope_opt.rope import yarn

    model, _ = load_model(model_name, device=device, dtype="bfloat16")
    spec = RopeSpec.from_config(model.config)
    kernel = getattr(model.config, "_attn_implementation", "?")
    report.line(f"\n{model_name} bf16, attention {kernel}: one forward with the chunked loss")
    report.line(f"{'tokens':>7} {'patched s':>10} {'tok/s':>9} {'peak GiB':>9} "
                f"{'unpatched s':>12} {'tok/s':>9} {'peak GiB':>9} {'overhead':>9}")  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    for n in lengths:
        ids = torch.randint(0, model.config.vocab_size, (n,), generator=generator)
        patched = timed(model, ids, yarn(spec, max(n, 2 * spec.original_length)))
        plain = timed(model, ids, None)
        report.record(f"speed/{n}", {"patched": patched, "unpatched": plain, "kernel": kernel})
        report.line(f"{n:>7} {patched[0]:>10.3f} {n / patched[0]:>9.0f} {patched[1]:>9.2f} "
                    f"{plain[0]:>12.3f} {n / plain[0]:>9.0f} {plain[1]:>9.2f} "
                    f"{100 * (patched[0] / plain[0] - 1):>+8.1f}%")  # fmt: skip
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def big_model(
    report: Report, *, device: str = "cuda", shape: dict[str, Any] | None = None,
    lengths: tuple[int, ...] = BIG_LENGTHS,
) -> None:  # fmt: skip
    """The 8B-shaped model's patched forward at `lengths`; a length that runs out of memory is
    a failed check, and after the last one the search goes down by quarters to the longest
    that fits (down to the first length)."""
    import torch
    import transformers

    from longrope_opt import RopeSpec
    from longrope_opt.rope import yarn

    config = transformers.LlamaConfig(**(shape or LLAMA_8B))
    config._attn_implementation = "sdpa"
    with torch.device(device):  # drawn in bf16 where it lives: no 32 GB fp32 copy first
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    spec = RopeSpec.from_config(config)
    weights = sum(p.numel() for p in model.parameters())
    memory = (f"{torch.cuda.get_device_properties(model.device).total_memory / 2**30:.0f} GiB card"
              if model.device.type == "cuda" else "on the CPU")  # fmt: skip
    report.line(f"\nLlama-3.1-8B shape, random bf16 weights ({weights / 1e9:.2f} B), SDPA, {memory}")
    generator = torch.Generator().manual_seed(0)
    todo, floor = list(lengths), min(lengths)
    while todo:
        n = todo.pop(0)
        ids = torch.randint(0, config.vocab_size, (n,), generator=generator)
        try:
            seconds, peak = timed(model, ids, yarn(spec, max(n, 2 * spec.original_length)))
        except torch.cuda.OutOfMemoryError:
            if model.device.type == "cuda":
                torch.cuda.empty_cache()
            report.check(f"8B patched forward {n}", False, "out of GPU memory")
            if not todo and n * 3 // 4 > floor:  # the longest that fits, found downwards
                todo.append(n * 3 // 4 // 1024 * 1024 or n * 3 // 4)
            continue
        report.record(f"8b/{n}", {"seconds": seconds, "peak_gib": peak})
        report.check(f"8B patched forward {n}", True,
                     f"{seconds:.2f} s, {n / seconds:.0f} tok/s, peak {peak:.1f} GiB")  # fmt: skip
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for table, results, logs")
    parser.add_argument("--runs", default="a", help="a, b, c, f, g or run A's parts by name "
                        "(correctness, speed, 8b), comma-separated, run in that order: "
                        "correctness,b,speed checks CUDA before the searches (default a)")  # fmt: skip
    parser.add_argument("--only", default=",".join(A_PARTS),
                        help=f"run A's parts (default all: {','.join(A_PARTS)})")  # fmt: skip
    parser.add_argument("--budget-b", default=",".join(B_BUDGETS),
                        help="run B's extend budget per length, comma-separated, or one for all "
                        f"(default {','.join(B_BUDGETS)})")  # fmt: skip
    parser.add_argument("--lengths-b", default=",".join(str(n) for n in B_LENGTHS),
                        help="run B's lengths, 4x first (default 32768,65536,131072)")  # fmt: skip
    parser.add_argument("--budget-g", type=int, default=G_SEARCH_S, metavar="S",
                        help=f"seconds run G's search may take (default {G_SEARCH_S})")  # fmt: skip
    parser.add_argument("--held-out", type=Path, default=None, metavar="DIR",
                        help="run B validates on this folder's text (entry.sh passes the kit's)")  # fmt: skip
    parser.add_argument("--train-text", type=Path, default=None, metavar="DIR",
                        help="run F trains on this folder's text (entry.sh passes the kit's)")  # fmt: skip
    parser.add_argument("--stop-after", type=float, default=None, metavar="S",
                        help="seconds this check may take (the device call's limit less a "
                        f"margin): a search still running {PACK_S:g} s before it is "
                        "interrupted and its study packed, and no part starts after it")  # fmt: skip
    args = parser.parse_args()
    if args.stop_after is not None and args.stop_after <= PACK_S:
        parser.error(f"--stop-after must be > {PACK_S:g} seconds, got {args.stop_after:g}")
    deadline = None if args.stop_after is None else time.monotonic() + args.stop_after - PACK_S
    runs, only = args.runs.split(","), args.only.split(",")
    if not set(runs) <= {"a", "b", "c", "f", "g", *A_PARTS}:
        parser.error(f"--runs must name a, b, c, f, g and/or run A's parts ({', '.join(A_PARTS)}), "
                     f"comma-separated, got {args.runs!r}")  # fmt: skip
    try:
        lengths_b = [int(n) for n in args.lengths_b.split(",")]
    except ValueError:
        parser.error(f"--lengths-b must be comma-separated token counts, got {args.lengths_b!r}")
    budgets_b = args.budget_b.split(",")
    budgets_b = budgets_b * len(lengths_b) if len(budgets_b) == 1 else budgets_b
    if len(budgets_b) != len(lengths_b):
        parser.error(f"--budget-b must give one budget or one per length ({len(lengths_b)}), "
                     f"got {args.budget_b!r}")  # fmt: skip
    if args.budget_g < 1:
        parser.error(f"--budget-g must be >= 1 second, got {args.budget_g}")
    if not set(only) <= set(A_PARTS):
        parser.error(f"--only must name {', '.join(A_PARTS)} (comma-separated), got {args.only!r}")
    names = sorted(p.name for p in args.held_out.glob("*.txt")) if args.held_out else []
    if args.held_out is not None and not names:
        parser.error(f"--held-out must be a folder of .txt files, got {str(args.held_out)!r}")
    if "f" in runs and (args.train_text is None or args.held_out is None):
        parser.error("--runs f needs --train-text and --held-out (a kit packed with --train "
                     "and --held-out: entry.sh passes both)")  # fmt: skip
    train = sorted(p.name for p in args.train_text.iterdir()) if args.train_text and args.train_text.is_dir() else []
    if args.train_text is not None and not train:
        parser.error(f"--train-text must be a folder of text files, got {str(args.train_text)!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=args.out / "check.log", level=logging.INFO)
    report = Report(args.out)
    if args.held_out is not None:
        report.record("held_out", names)
        report.line(f"run B validates on {len(names)} held-out texts in {args.held_out}")
    if args.train_text is not None:
        report.record("train_text", train)
        report.line(f"run F trains on {len(train)} texts in {args.train_text}")
    _, reference = prepare(report)
    if "g" in runs and not gemma_staged(report):
        return 1
    import torch

    if not torch.cuda.is_available():
        report.line(f"device check: no CUDA: torch {torch.__version__} sees no GPU here; "
                    "everything else is installed and loaded")  # fmt: skip
        return 2
    report.line(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
                f"CUDA {torch.version.cuda}")  # fmt: skip
    parts = {"correctness": lambda: correctness(report, reference), "speed": lambda: speed(report),
             "8b": lambda: big_model(report),
             "b": lambda: run_b(report, ROOT, budgets_b, lengths_b, args.held_out, deadline),
             "c": lambda: run_c(report, ROOT, args.held_out, deadline),
             "f": lambda: run_f(report, ROOT, args.held_out, args.train_text, deadline),
             "g": lambda: run_g(report, ROOT, args.held_out, deadline, args.budget_g)}  # fmt: skip
    # in the order asked: `--runs b,a` runs the searches first, run A's parts after;
    # `correctness,b,speed` checks CUDA against the CPU before any search spends the card
    wanted = [p for r in runs for p in (only if r == "a" else [r])]
    for part in wanted:
        if deadline is not None and time.monotonic() >= deadline:
            report.check(f"{part} ran", False, "not started: the call's time is spent (--stop-after)")
            continue
        start = time.perf_counter()
        try:  # one part failing must not cost the others' device minutes
            parts[part]()
        except Exception:  # noqa: BLE001  (reported as a failed check with its traceback)
            logging.exception("part %s", part)
            report.check(f"{part} ran", False, traceback.format_exc().strip().splitlines()[-1])
        report.record(f"seconds/{part}", time.perf_counter() - start)
    report.line(f"{report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
