"""`longrope-opt` command line: thin subcommands over the library.

Every subcommand parses its flags, calls one library function, and prints. Bad input is one line
on stderr and exit code 2 (a traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from longrope_opt import __version__
from longrope_opt.cli import _compare
from longrope_opt.cli import _dashboard
from longrope_opt.cli import _eval
from longrope_opt.cli import _export
from longrope_opt.cli import _extend
from longrope_opt.cli import _finetune
from longrope_opt.cli import _search
from longrope_opt.cli import _storage_server
from longrope_opt.cli import _validate
from longrope_opt.cli import _worker
from longrope_opt.cli._messages import in_flag_terms
from longrope_opt.cli._messages import parser_flags
from longrope_opt.errors import LongRopeOptError
from longrope_opt.urls import ENV_STORAGE
from longrope_opt.urls import scrub


_SUBCOMMANDS = {
    "extend": _extend,
    "search": _search,
    "eval": _eval,
    "validate": _validate,
    "export": _export,
    "compare": _compare,
    "dashboard": _dashboard,
    "worker": _worker,
    "finetune": _finetune,
    "storage-server": _storage_server,
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="longrope-opt",
        description="Search and evaluate LongRoPE rescale factors for pretrained LLMs.",
        epilog="Run `longrope-opt COMMAND --help` for a command's flags and examples.",
    )
    parser.add_argument("--version", action="version", version=f"longrope-opt {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _SUBCOMMANDS.values():
        module.add_parser(sub)
    return parser


class _StderrHandler(logging.Handler):
    """Writes to whatever `sys.stderr` is at the time (tests and notebooks swap it), with the
    library's parameter names written as the running command's flags."""

    flags: dict[str, str] = {}
    #: Storage URLs of the running command: their secrets never reach stderr.
    urls: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = scrub(in_flag_terms(self.format(record), self.flags), self.urls)
            print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            self.handleError(record)


def _log_to_stderr(flags: dict[str, str], urls: list[str]) -> None:
    # The library logs through `logging`; the CLI shows its info lines as it always printed them.
    root = logging.getLogger("longrope_opt")
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[longrope-opt] %(message)s"))
        root.addHandler(handler)
    handler.flags = flags
    handler.urls = urls
    root.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``longrope-opt`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    flags = {**parser_flags(args.parser), **args.param_flags}
    # Every storage URL the command was given (and the environment's): a password or token in
    # one is masked in whatever this process prints (`longrope_opt.urls`).
    urls = [str(getattr(args, name)) for name in ("storage", "store", "backend")
            if getattr(args, name, None)] + [os.environ.get(ENV_STORAGE, "")]  # fmt: skip
    _log_to_stderr(flags, urls)
    try:
        with warnings.catch_warnings():
            # Heartbeats, their retry callback and WilcoxonPruner are experimental in Optuna; we
            # use them on purpose, so their warnings would only bury our one-line errors.
            warnings.filterwarnings("ignore", message=r".*experimental")
            return int(args.run(args) or 0)
    except (LongRopeOptError, ImportError) as exc:  # ImportError: a missing optional extra
        if args.debug:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        line = scrub(in_flag_terms(first, flags), urls)
        print(f"longrope-opt {args.command}: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"longrope-opt {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
