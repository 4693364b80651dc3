"""`longrope-opt export`: the best factors of a study as JSON (with transformers rope_parameters)."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand


EXAMPLES = """examples:
  longrope-opt export --study-name smollm2-135m-16384 --output factors.json
  longrope-opt export --storage postgresql://user@host/db --study-name big -o big.json
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "export",
        summary="write a study's best factors as JSON",
        description="Write the best trial's λ, n_hat and attention scale as JSON, with a "
        "transformers `rope_parameters` dict of type longrope.",
        examples=EXAMPLES,
    )
    add_storage_flag(parser)
    parser.add_argument("--study-name", required=True, help="the study to export")
    parser.add_argument(
        "-o", "--output", default="factors.json", help="output file (default factors.json)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the study read-only and write the JSON."""
    import optuna

    from longrope_opt.errors import InvalidArgumentError
    from longrope_opt.studies import export_best
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url

    storage = make_storage(resolve_storage_url(args.storage))
    try:
        study = optuna.load_study(study_name=args.study_name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise InvalidArgumentError(
            f"`--study-name` {args.study_name!r} not found; studies: {names}."
        ) from None
    record = export_best(study, args.output)
    print(
        f"wrote {args.output}: trial {record['trial']}, value {record['value']:.4f}, n_hat {record['n_hat']}"
    )
    return 0
