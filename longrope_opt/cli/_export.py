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
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "export",
        summary="write a study's best factors as JSON or as a loadable model directory",
        description="Write the best trial's λ, n_hat and attention scale as JSON, with a "
        "transformers `rope_parameters` dict of type longrope; with --model-dir, save the model "
        "itself with those factors in its config (vanilla transformers loads it when n_hat = 0).",
        examples=EXAMPLES,
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
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.pipeline.export_winner`, say what was written."""
    check_output_file(args.output, flag="--output")
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.pipeline import RULES
    from longrope_opt.pipeline import export_winner

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
    return 0
