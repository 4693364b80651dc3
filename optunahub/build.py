"""Write the OptunaHub package's copies of the evolution from the project's own modules.

The registry loads a folder that may import only Optuna, NumPy and the standard library, while
the project keeps one implementation of the operators, the state in storage and the sampler in
`longrope_opt/samplers/`. This script copies those modules into `optunahub/samplers/longrope/`
with their imports made relative (the sampler reads a space through `EvolutionSpace`, which the
project's `SearchSpace` and the package's `MonotoneSpace` implement), and refuses any other
project import.
`tests/samplers_tests/test_optunahub.py` fails when the copies are out of date.

    python optunahub/build.py            # rewrite the copies
    python optunahub/build.py --check    # exit 1 if they differ from what would be written
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "longrope_opt" / "samplers"
TARGET = ROOT / "optunahub" / "samplers" / "longrope"
MODULES = (
    "_protocol.py",
    "_base.py",
    "_index.py",
    "_operators.py",
    "_state.py",
    "_population.py",
    "_seeding.py",
    "_options.py",
    "_surrogate.py",
    "_screen.py",
    "_history.py",
    "_longrope.py",
)
RULES = (
    (r"^(\s*)from longrope_opt\.samplers import _state$", r"\1from . import _state"),
    (r"^(\s*)from longrope_opt\.samplers\.(_\w+) import", r"\1from .\2 import"),
    (r"^(\s*)from longrope_opt\.errors import", r"\1from ._errors import"),
)


def generated(name: str) -> str:
    """The package's copy of `longrope_opt/samplers/<name>`."""
    text = (SOURCE / name).read_text()
    for pattern, repl in RULES:
        text = re.sub(pattern, repl, text, flags=re.MULTILINE)
    left = [line for line in text.splitlines() if "longrope_opt" in line and "import" in line]
    if left:
        raise SystemExit(f"build: {name} imports the project, not allowed in the package: {left}")
    header = f"# Generated from longrope_opt/samplers/{name} by optunahub/build.py: do not edit.\n"
    return header + text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 on a difference"
    )
    args = parser.parse_args()
    stale = [
        n for n in MODULES if not (TARGET / n).exists() or (TARGET / n).read_text() != generated(n)
    ]
    if args.check:
        for n in stale:
            print(f"build: optunahub/samplers/longrope/{n} is out of date", file=sys.stderr)
        return 1 if stale else 0
    for n in stale:
        (TARGET / n).write_text(generated(n))
        print(f"wrote optunahub/samplers/longrope/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
