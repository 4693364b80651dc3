"""`longrope-opt export`: a study's best factors as JSON, or as a model directory transformers loads."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_overwrite_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_output_file


EXAMPLES = """examples:
  longrope-opt export --study-name smollm2-135m-16384 --output factors.json
  longrope-opt export --storage postgresql://user@host/db --study-name big -o big.json
  # a model directory for AutoModelForCausalLM.from_pretrained (rope type longrope)
  longrope-opt export --study-name smollm2-135m-16384 --model-dir smol-16k
  # with recovered short factors (a `search --recovery` study) for inputs within the window
  longrope-opt export --study-name ft-32k --short-study ft-short-8k --model ft-16k --model-dir smol-32k
  # a GGUF for llama.cpp / Ollama: the study model's GGUF with the factors (and a Modelfile)
  longrope-opt export --study-name smollm2-135m-16384 --gguf smol-16k/smollm2-16k.gguf
  llama-cli -m smol-16k/smollm2-16k.gguf -c 16384 -f long.txt
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "export",
        summary="write a study's best factors as JSON or as a loadable model directory",
        description="Write the best trial's λ, n_hat and attention scale as JSON, with a "
        "transformers `rope_parameters` dict of type longrope; with --model-dir, save the model "
        "itself with those factors in its config (vanilla transformers loads it when n_hat = 0); "
        "with --gguf, a copy of the model's GGUF that llama.cpp runs at the study's length.",
        examples=EXAMPLES,
        param_flags={"source": "--gguf-source", "form": "--gguf-form"},
    )
    add_storage_flag(parser)
    parser.add_argument("--study-name", required=True, help="the study to export (long factors)")
    parser.add_argument(
        "-o", "--output", default="factors.json", help="output file (default factors.json)"
    )
    model = parser.add_argument_group("model directory")
    model.add_argument("--model-dir", default=None, help="also write a model directory here")
    add_overwrite_flag(model)
    add_device_flag(model, default="cpu")
    model.add_argument(
        "--model", default=None, help="weights to save (default: the model the study searched)"
    )
    model.add_argument(
        "--short-study", default=None, help="a --recovery study whose best are the short factors"
    )
    model.add_argument(
        "--save-dtype",
        default="bfloat16",
        choices=["bfloat16", "float32", "float16"],
        help="dtype of the saved weights (default bfloat16)",
    )
    gguf = parser.add_argument_group("GGUF (llama.cpp, Ollama, LM Studio)")
    gguf.add_argument("--gguf", default=None, help="also write a .gguf file here (must not exist)")
    gguf.add_argument(
        "--gguf-source",
        default=None,
        help="the GGUF whose tensors are copied (default: the one the study's model came from)",
    )
    gguf.add_argument(
        "--gguf-form",
        default="longrope",
        choices=["longrope", "freqs"],
        help="longrope: long and short factors, llama.cpp picks by context size (default); "
        "freqs: one rope_freqs tensor (Llama 3.1's slot, older llama.cpp builds), long factors always",
    )
    gguf.add_argument(
        "--drop-n-hat",
        action="store_true",
        help="export a winner with n_hat > 0 to GGUF without its n_hat (GGUF has no slot for it)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.pipeline.export_winner`, say what was written."""
    check_output_file(args.output, flag="--output")
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.models import check_output_dir
    from longrope_opt.pipeline import RULES
    from longrope_opt.pipeline import export_winner
    from longrope_opt.pipeline import export_winner_gguf

    if args.model_dir is not None:
        check_output_dir(args.model_dir, overwrite=args.overwrite, source=args.model,
                         param="model_dir")  # fmt: skip
    gguf = None
    if args.gguf is not None:  # first: its refusals (n_hat, no GGUF, ...) come before any write
        gguf = export_winner_gguf(
            args.study_name, args.gguf, storage=args.storage, source=args.gguf_source,
            short_study=args.short_study, form=args.gguf_form, drop_n_hat=args.drop_n_hat,
        )  # fmt: skip
    done = export_winner(
        args.study_name, args.output, storage=args.storage, model_dir=args.model_dir,
        model=args.model, short_study=args.short_study, save_dtype=args.save_dtype,
        overwrite=args.overwrite, device=args.device, attn=args.attn,
    )  # fmt: skip
    record = done.factors
    print(
        f"wrote {args.output}: trial {record['trial']} ({RULES[record['rule']]}), value "
        f"{record['value']:.4f}, n_hat {record['n_hat']}"
    )
    if done.model_dir is not None:
        how = "vanilla transformers" if done.vanilla else "longrope_opt.models.load_model (n_hat > 0)"
        print(f"wrote model directory {done.model_dir} (loads with {how})")
    if gguf is not None:
        print(describe_gguf(gguf))
    return 0


def describe_gguf(g: Any) -> str:
    """What a GGUF export wrote and how to run it, in the words a llama.cpp user needs."""
    lines = [
        f"wrote {g.path} ({g.form} factors, context {g.target_length}, attention factor "
        f"{g.attention_factor:.4f}) and {g.modelfile} (Ollama: num_ctx {g.target_length})",
        f"  run: llama-cli -m {g.path} -c {g.target_length}    (no other flag: the factors, "
        "the attention factor and the context length are in the file)",
    ]
    if g.form == "longrope":
        lines.append("  llama.cpp uses the long factors whenever the context (-c) exceeds the "
                     "trained length, for short prompts too; a -c within it, the short ones")  # fmt: skip
    if g.dropped_n_hat:
        lines.append(f"  dropped: n_hat={g.dropped_n_hat} (GGUF has no slot; the first tokens "
                     "use the scaled angles too)")  # fmt: skip
    return "\n".join(lines)
