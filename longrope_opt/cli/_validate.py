"""`longrope-opt validate`: a study's winners (and factor files) against the classic methods on
held-out documents and passkeys, with intervals and one verdict per candidate."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_dtype_flag
from longrope_opt.cli._common import add_margin_flag
from longrope_opt.cli._common import add_passkey_form_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import add_trained_length_flag
from longrope_opt.cli._common import check_output_file
from longrope_opt.cli._common import int_list


EXAMPLES = """examples:
  # the README's search, on built-in documents it did not use (they are left out by itself)
  longrope-opt validate --study-name smollm2-135m-16384 --docs 2
  # 5 held-out books at 32k, 20 passkeys, files table.csv/.json/.html
  longrope-opt validate --study-name 4x-floor --corpus ./prose/ --lengths 32k --docs 5 --output t
  # its 3 best trials too, and a factor file, at two lengths
  longrope-opt validate --study-name smol-32k --top 3 --factors mine.json --lengths 16k,32k
  # only the classic rows (measured once, reused by every later table in this storage)
  longrope-opt validate --corpus ./prose/ --lengths 16k --keys 20
  # a table written with --output, judged again (another --margin, this version's rules): no model
  longrope-opt validate --from-json t.json --margin 2%
  # fine-tuned models validated in separate runs (one a sitting), judged as one table
  longrope-opt validate --from-json ft-searched.json --from-json ft-yarn-cd.json --output ft
  # after fine-tuning alike: the two fine-tuned models beside the rows before fine-tuning, at 64k,
  # then inside the trained window against the base model (the short context kept)
  longrope-opt validate --study-name extend-smollm2-135m-65536 --models ft-searched --models ft-yarn-cd --corpus ./prose/ --lengths 64k --docs 3
  longrope-opt validate --models ft-searched --models ft-yarn-cd --classic none --corpus ./prose/ --lengths 4k --docs 5 --keys 0
  # the fine-tuned pair alone on more documents (the rows stored before are read, not measured)
  longrope-opt validate --models ft-searched --models ft-yarn-cd --classic '' --corpus ./prose/ --lengths 64k --docs 5 --keys 0

Every number is stored in the storage as it is made (keyed by model, text, length and
scaling): a rerun measures nothing twice, and an interruption loses one forward at most.
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "validate",
        summary="judge searched factors against the classic methods on held-out text and passkeys",
        description="Measure a study's winners (plain best, re-ranked, guarded; optionally its top "
        "trials) and factor files next to none, PI, NTK, YaRN, YaRN-cd and NTK-cd: perplexity per "
        "document with a paired bootstrap interval against the best classic row, passkey "
        "retrieval with a Wilson interval and an exact sign test, and one verdict per candidate.",
        examples=EXAMPLES,
    )
    rows = parser.add_argument_group("candidates")
    rows.add_argument("--study-name", action="append", default=[], metavar="NAME",
                      help="a study whose winners to judge (repeatable)")  # fmt: skip
    rows.add_argument("--factors", action="append", default=[], metavar="FILE.json",
                      help="factors written by `longrope-opt export` (repeatable)")  # fmt: skip
    rows.add_argument("--models", action="append", default=[], metavar="DIR",
                      help="a model directory measured as it loads (a fine-tuned export runs "
                      "its own factors), a row named by its folder, on the same documents and "
                      "prompts (repeatable); one fine-tuned from a formula (finetune --method) "
                      "counts as a formula row")  # fmt: skip
    rows.add_argument("--top", type=int, default=0, metavar="K",
                      help="also each study's K best trials (default 0)")  # fmt: skip
    add_storage_flag(rows)
    rows.add_argument("--store", default=None, metavar="URL",
                      help="where measurements are kept (default: the --storage database)")  # fmt: skip
    text = parser.add_argument_group("held-out text and passkeys")
    text.add_argument("--corpus", default="builtin",
                      help="'builtin', a .txt file or folder, or a datasets name; the documents "
                      "the studies searched or re-ranked on are left out")  # fmt: skip
    text.add_argument("--docs", type=int, default=5, metavar="N",
                      help="documents (>= 2: intervals are over documents; default 5)")  # fmt: skip
    text.add_argument("--windows", type=int, default=1, metavar="W",
                      help="up to W disjoint windows per document, for a corpus with few long "
                      "documents (default 1)")  # fmt: skip
    text.add_argument("--seed", type=int, default=0, help="chooses the documents (default 0)")
    text.add_argument("--lengths", default=None,
                      help="comma-separated lengths, e.g. 16k,32k (default: the studies' target "
                      "length, else 16384)")  # fmt: skip
    text.add_argument("--classic", default=",".join(("none", "pi", "ntk", "yarn", "yarn-cd", "ntk-cd")),
                      help="the classic rows, comma-separated (default all: none,pi,ntk,yarn,"
                      "yarn-cd,ntk-cd); the best of them is the reference; '' with --models: "
                      "the fine-tuned models alone, one fine-tuned from a formula the reference")  # fmt: skip
    text.add_argument("--keys", type=int, default=20, metavar="N",
                      help="passkey prompts per length (default 20; 0: none)")  # fmt: skip
    add_passkey_form_flag(text, default="single")
    add_margin_flag(text)
    add_trained_length_flag(text)
    text.add_argument("--from-json", default=None, metavar="FILE.json", action="append",
                      help="judge a table written with --output again, measuring nothing (no "
                      "model loads): its verdicts under this version's rules and --margin; "
                      "repeat it to judge tables measured apart (same documents and prompts) "
                      "as one")  # fmt: skip
    text.add_argument("--output", default=None, metavar="PREFIX",
                      help="also write PREFIX.csv, .json, .html (figure) and .txt (the table)")  # fmt: skip
    machine = parser.add_argument_group("model and machine")
    machine.add_argument("--model", default=None,
                         help="default: the study's model, else 'smollm2-135m'")  # fmt: skip
    add_dtype_flag(machine)
    add_device_flag(machine)
    machine.add_argument("--remeasure-other-paths", action="store_true",
                         help="measure again what the storage holds only from another compute "
                         "path (default: reuse it and say so)")  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.pipeline.validate_candidates`, print the table."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # the library's commands load torch; on use for the same reason
    from longrope_opt.pipeline import rerender_validation
    from longrope_opt.pipeline import validate_candidates

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    classic = [c.strip() for c in args.classic.split(",") if c.strip()]
    lengths = int_list(args.lengths, name="lengths") if args.lengths else None
    if args.output:
        check_output_file(f"{args.output}.csv", flag="--output")
    margin = {} if args.margin is None else {"margin": args.margin}
    if args.from_json:
        result = rerender_validation(args.from_json, output=args.output, **margin)
        print(result.table)
        if result.files:
            print(f"wrote {args.output}.json and .txt")
        return 0
    result = validate_candidates(
        args.study_name, args.factors, storage=args.storage, store=args.store, top=args.top,
        corpus=args.corpus, docs=args.docs, windows=args.windows, seed=args.seed,
        lengths=lengths, classic=classic, keys=args.keys, model=args.model, dtype=args.dtype,
        device=args.device, attn=args.attn, remeasure_other_paths=args.remeasure_other_paths,
        output=args.output, trained_length=args.trained_length,
        passkey_form=args.passkey_form, models=args.models, **margin,
    )  # fmt: skip
    print(result.table)
    print(f"\n{result.measured} measurements made now; the rest came from the storage.")
    if result.files:
        print(f"wrote {args.output}.csv, .json, .html and .txt")
    return 0
