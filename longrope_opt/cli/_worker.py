"""`longrope-opt worker`: join an existing search study and evaluate trials until its budget is spent."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from longrope_opt.cli._common import add_device_flag
from longrope_opt.cli._common import add_dtype_flag
from longrope_opt.cli._common import add_fuse_flag
from longrope_opt.cli._common import add_heartbeat_flag
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.urls import redact_url


EXAMPLES = """examples:
  # start the study once (it records its model, corpus, space, sampler and total budget) ...
  longrope-opt search --storage postgresql://user@db-host/longrope --study-name big --n-trials 500 --timeout 1
  # ... then on every machine, as many as you like; each stops when the study has 500 trials
  longrope-opt worker --storage postgresql://user@db-host/longrope --study-name big
  # a worker that dies mid-trial: after 2 heartbeats of silence its trial is failed and re-queued
  longrope-opt worker --storage postgresql://user@db-host/longrope --study-name big --heartbeat-interval 30
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "worker",
        summary="join a search study and evaluate trials until its total budget is spent",
        description="Rebuild the search a study was created with (model, corpus, space, sampler "
        "and objective are read from the study) and evaluate trials until the study holds its "
        "total number of finished trials. Any number of workers may share one study; use "
        "PostgreSQL for more than one.",
        examples=EXAMPLES,
    )
    add_storage_flag(parser)
    parser.add_argument("--study-name", required=True, help="an existing search study")
    parser.add_argument(
        "--n-trials", type=int, default=None, help="the study's total (default: as stored)"
    )
    parser.add_argument("--timeout", type=float, default=None, help="stop after SECONDS")
    add_heartbeat_flag(parser)
    machine = parser.add_argument_group("this machine")
    add_dtype_flag(machine)
    add_device_flag(machine)
    add_fuse_flag(machine)
    parser.set_defaults(run=run)


def _warn_if_sqlite_is_shared(url: str, study: Any) -> None:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from optuna.trial import TrialState

    if not url.startswith("sqlite"):
        return
    if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        print(
            "warning: another worker is running trials on this SQLite file; SQLite serialises "
            "every write and cannot lock rows, so several workers contend and may time out. "
            "Use PostgreSQL for more than one worker: --storage postgresql://user@host/db",
            file=sys.stderr,
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    """Rebuild the study's `SearchConfig`, then run the same search loop as `search`."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.cli._search import execute
    from longrope_opt.studies import SearchConfig
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import record
    from longrope_opt.studies import resolve_storage_url

    url = resolve_storage_url(args.storage)
    storage = make_storage(url, must_exist=True)  # a worker joins a study that exists
    try:
        study = optuna.load_study(study_name=args.study_name, storage=storage)
    except KeyError:
        raise InvalidArgumentError(
            f"`--study-name` {args.study_name!r} not found in {redact_url(url)}; create it with "
            "`longrope-opt search` first."
        ) from None
    config = SearchConfig.from_study(study)
    n_trials = args.n_trials if args.n_trials is not None else record.read_total(study)
    if n_trials is None and args.timeout is None:
        raise InvalidArgumentError(
            f"study {args.study_name!r} has no stored total; give `--n-trials` or `--timeout`."
        )
    _warn_if_sqlite_is_shared(url, study)
    return execute(
        config,
        storage=url,
        study_name=args.study_name,
        n_trials=n_trials,
        timeout=args.timeout,
        dtype=args.dtype,
        device=args.device,
        attn=args.attn,
        fuse=args.fuse,
        heartbeat_interval=args.heartbeat_interval,
        store_total=False,
    )
