"""The one place where library messages become messages about flags.

The library names its parameters in backticks (`` `n_trials` must be >= 1 ``); a user of the
command typed ``--n-trials``. `in_flag_terms` rewrites every backticked parameter the command
takes as a flag (found in the command's own parser: its ``dest``) and the few whose library
name differs (a command's ``PARAM_FLAGS``, e.g. `k` → ``--samples``), and leaves the rest.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping


def parser_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{dest: its long option}`` for every flag of `parser`."""
    flags = {}
    for action in parser._actions:  # argparse has no public accessor for its actions
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and action.dest not in ("help", "version"):
            flags[action.dest] = longs[0]
    return flags


def in_flag_terms(message: str, flags: Mapping[str, str]) -> str:
    """`message` with each backticked parameter that has a flag written as that flag."""

    def swap(match: re.Match) -> str:
        name = match.group(1)
        return f"`{flags[name]}`" if name in flags else match.group(0)

    return re.sub(r"`([A-Za-z_][A-Za-z0-9_]*)`", swap, message)
