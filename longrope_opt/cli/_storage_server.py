"""`longrope-opt storage-server`: Optuna's gRPC storage proxy in front of a database, for fleets of
workers (`optuna.storages.run_grpc_proxy_server`; this command only opens the storage)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from longrope_opt.cli._common import add_listen_flags
from longrope_opt.cli._common import add_storage_flag
from longrope_opt.cli._common import add_subcommand
from longrope_opt.cli._common import check_host
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.urls import redact_url


EXAMPLES = """examples:
  # the proxy in front of PostgreSQL, on this machine only (the default: loopback)
  longrope-opt storage-server --storage postgresql://user@db-host/longrope --port 13000
  longrope-opt worker --storage grpc://127.0.0.1:13000 --study-name smol-128k
  # workers on other machines reach it through an SSH tunnel (nothing listens beyond loopback)
  ssh -N -L 13000:127.0.0.1:13000 proxy-host      # on each worker machine, then --storage grpc://127.0.0.1:13000
  # on a private network you trust: the proxy has no authentication, so say so explicitly
  longrope-opt storage-server --storage postgresql://user@db-host/longrope --host 10.0.0.5 --allow-remote
  # in front of a journal file on a shared file system
  longrope-opt storage-server --storage journal:////shared/longrope.log --port 13000
"""


def add_parser(sub: Any) -> None:
    """Register the subcommand."""
    parser = add_subcommand(
        sub,
        "storage-server",
        summary="serve a storage to many workers through Optuna's gRPC proxy",
        description="Run Optuna's gRPC storage proxy in front of a database (or a journal file): "
        "workers connect to it with `--storage grpc://HOST:PORT` instead of each holding "
        "connections to the database. Stop it with Ctrl-C; workers wait for it to come back.",
        examples=EXAMPLES,
    )
    add_storage_flag(parser)
    add_listen_flags(
        parser, port=13000,
        danger="Optuna's gRPC proxy has NO authentication and no encryption: anyone who can "
        "reach the port can read, rewrite or delete every study behind it. Use it only on a "
        "private network you trust; otherwise an SSH tunnel (see examples)",
    )  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # on use: `--help` and bad input stay light (torch loads in seconds)
    import optuna

    from longrope_opt.studies import make_storage  # on use, as above: it imports the models
    from longrope_opt.studies import resolve_storage_url

    if not 0 < args.port < 65536:
        raise InvalidArgumentError(f"`--port` must be in [1, 65535], got {args.port}.")
    remote = check_host(args.host, args.allow_remote, what="the proxy")
    url = resolve_storage_url(args.storage)
    if url.startswith("grpc"):
        raise InvalidArgumentError(
            f"`--storage` must be a database or a journal file to serve, got the proxy "
            f"{redact_url(url)!r}."
        )
    # Optuna's cache in front of an RDB, as its documentation advises for the proxy.
    storage = optuna.storages.get_storage(make_storage(url))
    # That cache maps a trial to its study only for trials it has read or created, and its
    # set_trial_param looks the map up: on a restarted proxy, a worker that was mid-suggest got
    # NOT_FOUND for its own trial. Reading every study's trials once, before serving, fills it;
    # trials created later come through this proxy and enter the map as they are created.
    for study in storage.get_all_studies():
        storage.get_all_trials(storage.get_study_id_from_name(study.study_name), deepcopy=False)
    if remote:
        print(f"warning: listening on {args.host}:{args.port} with no authentication: anyone who "
              "can reach this port can read, rewrite or delete every study in it.",
              file=sys.stderr, flush=True)  # fmt: skip
    print(f"serving {redact_url(url)} on {args.host}:{args.port}; workers: --storage grpc://{args.host}:"
          f"{args.port}", flush=True)  # fmt: skip
    try:
        optuna.storages.run_grpc_proxy_server(storage, host=args.host, port=args.port)
    except KeyboardInterrupt:
        print("storage server stopped", flush=True)
    return 0
