"""`longrope-opt extend`: from a model to a model you can ship, in one command."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_dtype_flag
from longrope_opt.cli._common import add_fuse_flag
from longrope_opt.cli._common import add_heartbeat_flag
from longrope_opt.cli._common import add_margin_flag
from longrope_opt.cli._common import add_passkey_form_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import add_trained_length_flag
from longrope_opt.cli._common import int_list
from longrope_opt.errors import InvalidArgumentError


EXAMPLES = """examples:
  # the README's main job: SmolLM2-135M to 16k tokens, sized to 20 minutes, offline
  longrope-opt extend smollm2-135m --to 16k --budget 20m
  # a fixed amount of work (the same study on every machine): 12 search trials
  longrope-opt extend smollm2-135m --to 16k --trials 12 --out smol-16k
  # your own text to search on, a different kind of text to validate on, a GPU
  longrope-opt extend ./my-model --to 32k --corpus builtin,./books/ --held-out ./papers/ --budget 2h --device cuda
  # interrupted (Ctrl-C, kill -9, a reboot)? run the same command: it continues where it stopped
  # progressive: 8x from the 4x winner, carried to 64k and tried first after the formula seeds
  longrope-opt extend smollm2-135m --to 64k --warm-start smol-32k/factors.json --out smol-64k
  # the method's second half: then fine-tune the winner and the best formula alike (200 PoSE
  # steps on Perl's manual: apt-get install perl-doc), validate both, ship the better
  longrope-opt extend smollm2-135m --to 64k --trials 16 --finetune 200 --out smol-64k
  # the same with LoRA adapters (rank 16; the norms train in full), as on one GPU
  longrope-opt extend smollm2-135m --to 64k --trials 16 --finetune 200 --finetune-lora 16 --out smol-64k
  # the second offline model: Gemma 3 270M (32k trained; its global layers are rescaled, its
  # sliding-window layers keep their RoPE and run banded), 2x on a CPU
  longrope-opt extend gemma3-270m --to 64k --budget 20m

The stages, in one study (rerun to resume; every stage keeps its output in the storage):
  # search: a LongRoPE evolution on 3 documents taking turns over the corpus's kinds of text,
  #   seeded by YaRN, YaRN-cd and NTK-cd; a candidate stops reading documents once it cannot
  #   enter the population, and one that would enter must retrieve passkeys as well as the
  #   best seed
  # guard: the best candidates on other passkeys; the best that retrieves as well ships
  # validate: the winner against the classic methods on held-out documents no stage read
  # export: DIR/model (vanilla transformers loads it), DIR/factors.json, DIR/validation.txt
  #   and .csv, DIR/report.html; when the winner does not dominate the best classic row, that
  #   row is exported too and the summary says to use it; DIR/model.gguf and DIR/Modelfile
  #   holding what the verdict ships, when the model came as a GGUF llama.cpp can rescale
  #   (smollm2-135m does, gemma3-270m cannot; --gguf / --no-gguf to choose):
  llama-cli -m extended/model.gguf -c 16384
  # finetune (--finetune STEPS): the winner and the validation's reference formula fine-tuned
  #   alike (same text, order, seed, steps, schedule; PoSE to --to from trained-length samples,
  #   a fifth inside the window under the original RoPE) into DIR/finetuned and
  #   DIR/finetuned-<formula>, both validated (DIR/validation-finetuned.txt: at --to with
  #   passkeys, beside the rows measured before; DIR/validation-short.txt: inside the trained
  #   window against the base model); the load line, DIR/finetuned.gguf and the report's first
  #   section name what to ship after fine-tuning. Its steps are not in the --budget plan.
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "extend",
        summary="extend a model's context in one command: search, guard, validate, export",
        description="Search RoPE rescale factors that extend MODEL to --to tokens, check them "
        "against the classic methods on text the search never read, and write a model "
        "directory you can ship. Prints its plan (sized to --budget from one timed forward) "
        "before anything runs.",
        examples=EXAMPLES,
    )
    parser.add_argument("model", nargs="?", default="smollm2-135m",
                        help="'smollm2-135m' (offline default), 'gemma3-270m', a model "
                        "directory, a .gguf file, or a hub id")  # fmt: skip
    parser.add_argument("--to", required=True, metavar="LENGTH", dest="target_length",
                        help="the context length to reach, e.g. 16k or 32768")  # fmt: skip
    text = parser.add_argument_group("text")
    text.add_argument("--corpus", default="builtin",
                      help="the search's text: 'builtin' (offline: prose and code), a .txt "
                      "file or folder, a datasets name, or several comma-separated")  # fmt: skip
    text.add_argument("--held-out", default=None, metavar="CORPUS",
                      help="the validation's text (default: --corpus; only documents no stage "
                      "read are used, too few is refused before the search starts)")  # fmt: skip
    text.add_argument("--seed", type=int, default=0, help="chooses the documents (default 0)")
    add_margin_flag(text)
    add_trained_length_flag(text)
    add_passkey_form_flag(text, default="single", auto=True)
    parser.add_argument_group("progressive extension").add_argument(
                      "--warm-start", default=None, metavar="FACTORS",
                      help="a shorter extension's factors to try first: its factors.json, or "
                      "study:NAME in --storage; carried to --to (λ^k, k = ln s'/ln s) as "
                      "LongRoPE extends step by step (default: none)")  # fmt: skip
    tune = parser.add_argument_group("fine-tuning (the method's second half)")
    tune.add_argument("--finetune", type=int, default=None, metavar="STEPS",
                      help="then fine-tune the winner and the best formula alike for STEPS "
                      "steps, validate both, ship the better (default: no fine-tuning)")  # fmt: skip
    tune.add_argument("--finetune-corpus", default="perl-doc", metavar="CORPUS",
                      help="the fine-tuning's text (default perl-doc: Perl's manual, Debian's "
                      "perl-doc; neither the search's corpus nor held-out books)")  # fmt: skip
    tune.add_argument("--finetune-lora", type=int, default=None, metavar="R",
                      help="with --finetune: train LoRA adapters of rank R on the attention "
                      "projections (norms in full) instead of every weight, as on one GPU; the "
                      "merged model ships, its adapter beside it (default: every weight)")  # fmt: skip
    tune.add_argument("--learning-rate", type=float, default=None,
                      help="with --finetune: AdamW's peak (default 2e-5, LongRoPE's; 2e-4 with "
                      "--finetune-lora, LoRA's usual)")  # fmt: skip
    size = parser.add_argument_group("how much").add_mutually_exclusive_group()
    size.add_argument("--budget", default=None, metavar="TIME",
                      help="wall time for everything, e.g. 20m, 2h, 1h30m (default 1h)")  # fmt: skip
    size.add_argument("--trials", type=int, default=None, metavar="N",
                      help="instead of --budget: N search trials and the default settings")  # fmt: skip
    where = parser.add_argument_group("where")
    where.add_argument("--out", default="extended", metavar="DIR",
                       help="folder for the model, factors, tables and report (default extended)")  # fmt: skip
    where.add_argument("--gguf", action=argparse.BooleanOptionalAction, default=None,
                       help="also write model.gguf for llama.cpp / Ollama (default: when the "
                       "model came as a GGUF, as smollm2-135m does)")  # fmt: skip
    add_storage_flag(where)
    add_heartbeat_flag(where)
    where.add_argument("--study-name", default=None,
                       help="default: extend-<model>-<length>")  # fmt: skip
    machine = parser.add_argument_group("machine")
    add_dtype_flag(machine)
    add_device_flag(machine)
    add_fuse_flag(machine)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, call `longrope_opt.extend`, print the plan and the summary."""
    (length,) = int_list(args.target_length, name="to")
    if args.trials is not None and args.trials < 1:
        raise InvalidArgumentError(f"`--trials` must be an integer >= 1, got {args.trials}.")
    if args.seed < 0:
        raise InvalidArgumentError(f"`--seed` must be an integer >= 0, got {args.seed}.")
    if args.finetune is not None and args.finetune < 1:
        raise InvalidArgumentError(f"`--finetune` must be an integer >= 1 (steps), got {args.finetune}.")
    if args.learning_rate is not None and args.finetune is None:
        raise InvalidArgumentError("`--learning-rate` needs `--finetune` (its steps).")
    if args.learning_rate is not None and not args.learning_rate > 0:
        raise InvalidArgumentError(f"`--learning-rate` must be > 0, got {args.learning_rate}.")
    if args.finetune_lora is not None:
        if args.finetune is None:
            raise InvalidArgumentError("`--finetune-lora` needs `--finetune` (its steps).")
        if args.finetune_lora < 1:
            raise InvalidArgumentError(f"`--finetune-lora` must be a rank >= 1, got {args.finetune_lora}.")
        if importlib.util.find_spec("peft") is None:  # before the search, not after it
            raise InvalidArgumentError("`--finetune-lora` needs peft: pip install 'longrope-opt[lora]'.")
    tuning = {k: v for k, v in (("learning_rate", args.learning_rate), ("lora", args.finetune_lora))
              if v is not None}  # fmt: skip
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # the library's commands load torch; on use for the same reason
    from longrope_opt.pipeline import extend
    from longrope_opt.pipeline import parse_budget

    if args.budget is not None:
        parse_budget(args.budget)  # a typo is one line before the model loads
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def show(plan: Any, resumed: bool) -> None:
        print(plan.describe(length) + ("\n  (resumed: the plan stored in the study)" if resumed
                                       else ""), flush=True)  # fmt: skip

    try:
        result = extend(args.model, length, corpus=args.corpus, held_out=args.held_out,
                        budget=args.budget, trials=args.trials, out=args.out,
                        storage=args.storage, study_name=args.study_name, device=args.device,
                        dtype=args.dtype, attn=args.attn, fuse=args.fuse,
                        heartbeat_interval=args.heartbeat_interval, seed=args.seed,
                        graceful_interrupt=True, on_plan=show,
                        trained_length=args.trained_length, passkey_form=args.passkey_form,
                        gguf=args.gguf, warm_start=args.warm_start,
                        finetune=args.finetune, finetune_corpus=args.finetune_corpus,
                        finetune_settings=tuning or None,
                        **({} if args.margin is None else {"margin": args.margin}))  # fmt: skip
    except KeyboardInterrupt:
        print("\ninterrupted: every finished stage and trial is stored; run the same command to "
              "continue.")  # fmt: skip
        return 130
    if result.nothing_left:
        said = result.finetuned.headline if result.finetuned else result.headline
        print(f"nothing left to measure: study {result.study.study_name!r} holds its trials, "
              f"guard and validation, and {args.out} holds what it wrote — {said}")  # fmt: skip
        print(f"load it: {result.load}")
        return 0
    print("\n" + result.headline)
    files = result.files
    for what, where in files:
        print(f"  {what}: {where}")
    if result.finetuned is not None:  # what to ship now: last, above the load line
        print("\n" + result.finetuned.headline)
        files = result.finetuned.files
        for what, where in files:
            print(f"  {what}: {where}")
    print(f"load it: {result.load}")
    gguf = next((where for what, where in files if where.endswith(".gguf")), None)
    if gguf is not None:
        print(f"run it in llama.cpp: llama-cli -m {gguf} -c {length}")
    return 0
