"""`longrope-opt validate`: a study's winners (and factor files) against the classic methods on
held-out documents and passkeys, with intervals and one verdict per candidate."""

from __future__ import annotations

import argparse
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_dtype_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_output_file
from longrope_opt.cli._common import int_list
from longrope_opt.errors import InvalidArgumentError


EXAMPLES = """examples:
  # the README's search, on built-in documents it did not use (they are left out by itself)
  longrope-opt validate --study-name smollm2-135m-16384 --docs 2
  # 5 held-out books at 32k, 20 passkeys, files table.csv/.json/.html
  longrope-opt validate --study-name 4x-floor --corpus ./prose/ --lengths 32k --docs 5 --output t
  # its 3 best trials too, and a factor file, at two lengths
  longrope-opt validate --study-name smol-32k --top 3 --factors mine.json --lengths 16k,32k
  # only the classic rows (measured once, reused by every later table in this storage)
  longrope-opt validate --corpus ./prose/ --lengths 16k --keys 20

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
                      "yarn-cd,ntk-cd); the best of them is the reference")  # fmt: skip
    text.add_argument("--keys", type=int, default=20, metavar="N",
                      help="passkey prompts per length (default 20; 0: none)")  # fmt: skip
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


def _check_counts(args: argparse.Namespace) -> None:
    for flag, value, low in (("--docs", args.docs, 2), ("--windows", args.windows, 1),
                             ("--keys", args.keys, 0), ("--top", args.top, 0),
                             ("--seed", args.seed, 0)):  # fmt: skip
        if value < low:
            raise InvalidArgumentError(f"`{flag}` must be an integer >= {low}, got {value}.")


def run(args: argparse.Namespace) -> int:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.data import check_source
    from longrope_opt.data import load_samples
    from longrope_opt.evaluation import CLASSIC
    from longrope_opt.evaluation import MeasurementStore
    from longrope_opt.evaluation import factor_rows
    from longrope_opt.evaluation import format_summary
    from longrope_opt.evaluation import study_rows
    from longrope_opt.evaluation import summarize
    from longrope_opt.evaluation import summary_csv
    from longrope_opt.evaluation import summary_json
    from longrope_opt.evaluation import validate
    from longrope_opt.files import write_text_atomic
    from longrope_opt.models import load_model
    from longrope_opt.models import load_tokenizer
    from longrope_opt.models import read_config
    from longrope_opt.rope import RopeSpec
    from longrope_opt.studies import load_named_study
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import record
    from longrope_opt.studies import resolve_storage_url
    from longrope_opt.studies import study_documents

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _check_counts(args)
    classic = [c.strip() for c in args.classic.split(",") if c.strip()]
    unknown = [c for c in classic if c not in CLASSIC]
    if unknown:
        raise InvalidArgumentError(
            f"`--classic` must name rows among {', '.join(CLASSIC)}, got {unknown[0]!r}."
        )
    lengths = int_list(args.lengths, name="lengths") if args.lengths else None
    if args.output:
        check_output_file(f"{args.output}.csv", flag="--output")
    check_source(args.corpus)
    storage = make_storage(resolve_storage_url(args.storage))
    studies = [load_named_study(storage, name) for name in args.study_name]
    candidates = [row for s in studies for row in study_rows(s, top=args.top)]
    candidates += factor_rows(args.factors)
    provenance = [record.read_provenance(s) for s in studies]
    model_name = args.model or next((p["model"] for p in provenance if p.get("model")),
                                    "smollm2-135m")  # fmt: skip
    if lengths is None:
        lengths = sorted({int(p["target_length"]) for p in provenance if p.get("target_length")})
        lengths = lengths or [16384]
    config = read_config(model_name)
    if config is not None:  # a length inside the trained window has no classic extension
        trained = RopeSpec.from_config(config).original_length
        inside = [n for n in lengths if n <= trained]
        if inside:
            raise InvalidArgumentError(
                f"`--lengths` must be above the model's trained length {trained}, got {inside[0]}."
            )
    if not candidates and not classic:
        raise InvalidArgumentError("nothing to measure: give `--study-name`, `--factors` or `--classic`.")
    exclude = [doc for s in studies for doc in study_documents(s)]
    tokenizer = load_tokenizer(model_name)  # seconds: the corpus is checked before the weights
    docs = load_samples(args.corpus, tokenizer, max(lengths), args.docs, args.seed,
                        exclude=exclude, windows=args.windows)  # fmt: skip
    model, tokenizer = load_model(model_name, dtype=args.dtype, device=args.device, attn=args.attn)
    path = (getattr(model, "longrope_opt_compute", None) or {}).get("path", args.dtype)
    store_at = make_storage(resolve_storage_url(args.store)) if args.store else storage
    store = MeasurementStore(store_at, path=path, reuse_other_paths=not args.remeasure_other_paths)
    validation = validate(model, tokenizer, candidates, docs, lengths=lengths, store=store,
                          keys=args.keys, doc_ids=docs.doc_ids, classic=classic)  # fmt: skip
    summary = summarize(validation)
    text = format_summary(summary)
    print(text)
    print(f"\n{validation.measured} measurements made now; the rest came from the storage.")
    if args.output:
        # on use: `--help` and bad input stay light (torch loads in seconds)
        from longrope_opt.viz import validation_figure

        write_text_atomic(f"{args.output}.csv", summary_csv(summary))
        write_text_atomic(f"{args.output}.json", summary_json(summary))
        fig = validation_figure(summary.to_dict())
        fig.write_html(f"{args.output}.html", include_plotlyjs="cdn")
        print(f"wrote {args.output}.csv, .json, .html and .txt")
        write_text_atomic(f"{args.output}.txt", text + "\n")
    return 0
