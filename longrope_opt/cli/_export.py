"""`longrope-opt export`: a study's best factors as JSON, or as a model directory transformers loads."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_overwrite_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_output_file
from longrope_opt.errors import InvalidArgumentError


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
    """Load the study read-only and write the JSON (and the model directory when asked)."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import best_scaling
    from longrope_opt.studies import export_best
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url

    check_output_file(args.output, flag="--output")
    if args.model_dir:  # before the study is read or any weights load
        # on use: `--help` and bad input stay light (torch loads in seconds)
        from longrope_opt.models import check_output_dir

        check_output_dir(
            args.model_dir, overwrite=args.overwrite, source=args.model, param="model_dir"
        )
    storage = make_storage(resolve_storage_url(args.storage), must_exist=True)
    study = load_named_study(storage, args.study_name)
    short = None
    if args.short_study:
        short, _ = best_scaling(load_named_study(storage, args.short_study, param="short_study"))
    record = export_best(study, args.output)
    why = {
        "guarded": "the retrieval guard's winner: the best re-ranked trial that retrieves as many "
        "passkeys as the study's best seed",
        "re-ranked": "the best trial at full fidelity (re-ranked)",
        "best": "the study's best trial",
    }[record["rule"]]
    print(
        f"wrote {args.output}: trial {record['trial']} ({why}), value {record['value']:.4f}, "
        f"n_hat {record['n_hat']}"
    )
    if args.model_dir:
        _export_dir(args, study, short)
    return 0


def _export_dir(args: argparse.Namespace, study: Any, short: Any) -> None:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt import RopeSpec
    from longrope_opt.models import as_pair
    from longrope_opt.models import export_model
    from longrope_opt.models import load_model
    from longrope_opt.models import needs_loader
    from longrope_opt.rope import ShortLongScaling
    from longrope_opt.studies import SearchConfig
    from longrope_opt.studies import best_scaling
    from longrope_opt.studies import record

    long, best = best_scaling(study)
    model_name = args.model
    if not model_name:
        try:
            model_name = SearchConfig.from_study(study).model
        except InvalidArgumentError:
            raise InvalidArgumentError(
                f"study {study.study_name!r} records no model; give `--model`."
            ) from None
    target = record.target_length(study)
    if target is None:
        raise InvalidArgumentError(f"study {study.study_name!r} records no target length.")
    model, tokenizer = load_model(model_name, dtype="float32", device=args.device, attn=args.attn)
    spec = RopeSpec.from_config(model.config)
    scaling: Any = long
    if short is not None:
        scaling = ShortLongScaling(short, long, spec.original_length)
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import study_winner

    meta = {"study": study.study_name, "trial": best.number, "value": best.value,
            "rule": study_winner(study).rule}  # fmt: skip
    out = export_model(
        model, tokenizer, args.model_dir, scaling, target_length=int(target),
        dtype=args.save_dtype, metadata=meta, overwrite=args.overwrite,
    )  # fmt: skip
    loader = needs_loader(as_pair(scaling, spec))
    how = "longrope_opt.models.load_model (n_hat > 0)" if loader else "vanilla transformers"
    print(f"wrote model directory {out} (loads with {how})")
