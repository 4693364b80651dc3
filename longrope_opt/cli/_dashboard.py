"""`longrope-opt dashboard`: optuna-dashboard on the study storage, with our figures attached."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from longrope_opt.cli._common import add_listen_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_host
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.urls import redact_url


EXAMPLES = """examples:
  # the default storage (sqlite:///longrope.db), on http://127.0.0.1:8080
  longrope-opt dashboard
  # a PostgreSQL study database, on this machine; from yours through an SSH tunnel
  longrope-opt dashboard --storage postgresql://user@db-host/longrope --port 8081
  # reachable from other machines (no authentication: anyone there can edit the studies)
  longrope-opt dashboard --storage postgresql://user@db-host/longrope --host 10.0.0.5 --allow-remote
  # only attach the figures (for a dashboard someone else runs)
  longrope-opt dashboard --attach-only
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "dashboard",
        summary="serve optuna-dashboard on the studies, with λ and generation figures",
        description="Attach the λ-curve and best-per-generation figures to every study in the "
        "storage (they show under each study in optuna-dashboard), then serve the dashboard.",
        examples=EXAMPLES,
    )
    add_storage_flag(parser)
    add_listen_flags(
        parser, port=8080,
        danger="optuna-dashboard has NO authentication: anyone who reaches the port can read, "
        "edit and delete the studies",
    )  # fmt: skip
    parser.add_argument(
        "--attach-only", action="store_true", help="attach the figures and exit without serving"
    )
    parser.set_defaults(run=run)


def _check_bindable(host: str, port: int) -> None:
    # optuna-dashboard would fail with a traceback from inside its server thread.
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidArgumentError(
            f"`--host` {host!r} does not resolve: {exc.strerror}."
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(address)
        except OSError as exc:
            raise InvalidArgumentError(
                f"`--port` {port} on {host!r} cannot be used: {exc.strerror}; pick another --port."
            ) from None


def attach_all(storage: Any) -> dict[str, list[str]]:
    """Attach figures to every study in `storage`; ``{study name: [figure names]}``."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.viz import attach_figures

    attached = {}
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        attached[summary.study_name] = attach_figures(study)
    return attached


def run(args: argparse.Namespace) -> int:
    """Attach, then serve until Ctrl-C."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.studies import make_storage
    from longrope_opt.studies import resolve_storage_url

    if not 0 < args.port < 65536:
        raise InvalidArgumentError(f"`--port` must be in [1, 65535], got {args.port}.")
    try:
        # on use: `--help` and bad input stay light (torch loads in seconds)
        import optuna_dashboard
    except ImportError:
        raise InvalidArgumentError(
            "the dashboard needs optuna-dashboard: pip install 'longrope-opt[dashboard]'."
        ) from None
    remote = False
    if not args.attach_only:  # before anything is attached; a host that cannot be bound first
        _check_bindable(args.host, args.port)
        remote = check_host(args.host, args.allow_remote, what="optuna-dashboard")
    url = resolve_storage_url(args.storage)
    storage = make_storage(url, must_exist=True)  # a viewer never creates a database
    for name, figures in attach_all(storage).items():
        print(f"  {name}: {', '.join(figures) or 'no completed trial yet'}", flush=True)
    if args.attach_only:
        return 0
    if remote:
        print(f"warning: listening on {args.host}:{args.port} with no authentication: anyone who "
              "can reach this port can read, edit or delete every study in it.",
              file=sys.stderr, flush=True)  # fmt: skip
    print(
        f"optuna-dashboard on http://{args.host}:{args.port}/ for {redact_url(url)} (Ctrl-C stops)", flush=True
    )
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a server is stopped
        optuna_dashboard.run_server(storage, host=args.host, port=args.port)
    return 0
