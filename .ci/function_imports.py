"""Imports inside functions only with a reason: each block of them carries a comment.

A function-level import buys start-up time (the CLI keeps torch and transformers out of `--help`
and of its input checks) or defers an optional dependency (nevergrad, plotly, optuna-dashboard,
scipy, datasets). Anything else belongs at the top of its module. A block is a run of import
lines; its reason is a comment on the line above it or on one of its lines.

    python .ci/function_imports.py        # exit 1, listing the blocks without a reason
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def blocks_without_reason(path: Path) -> list[int]:
    text = path.read_text()
    lines = text.splitlines()
    found: list[int] = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body_imports = sorted(
            {n.lineno: n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
            .items()
        )  # fmt: skip
        previous_end = -2
        block: list[ast.stmt] = []
        for _, imp in body_imports + [(10**9, None)]:  # type: ignore[list-item]
            if imp is not None and imp.lineno == previous_end + 1:
                block.append(imp)
            else:
                if block:
                    first, last = block[0].lineno, block[-1].end_lineno or block[-1].lineno
                    above = lines[first - 2].strip() if first >= 2 else ""
                    inside = any("#" in lines[i - 1] for i in range(first, last + 1))
                    if not (above.startswith("#") or inside):
                        found.append(first)
                block = [imp] if imp is not None else []
            if imp is not None:
                previous_end = imp.end_lineno or imp.lineno
    return sorted(set(found))


def main() -> int:
    bad = [(p, n) for p in sorted(Path("longrope_opt").rglob("*.py")) for n in blocks_without_reason(p)]
    for path, line in bad:
        print(f"{path}:{line}: an import inside a function with no comment saying why")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
