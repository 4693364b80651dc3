"""The README's and the docs' Python examples run as written (those that need no long compute).

Every ```python block of README.md and docs/**/*.md runs in a fresh interpreter, from the
repository root; a block preceded by an HTML comment ``<!-- not run: reason -->`` is skipped
(loading SmolLM2 and evaluating 16k tokens, say), and that comment must give a reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)


def examples() -> list[tuple[str, str, str | None]]:
    """(page:line, code, reason it is not run or None) for every Python block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text[: m.start("code")].count("\n") + 1
            skip = re.fullmatch(r"<!-- not run: (.+) -->", m.group("before").strip())
            found.append((f"{page.relative_to(ROOT)}:{line}", m.group("code"),
                          skip.group(1) if skip else None))  # fmt: skip
    return found


def test_there_are_examples_to_run_and_every_skip_says_why() -> None:
    found = examples()
    assert sum(reason is None for _, _, reason in found) >= 2
    assert all(reason is None or len(reason) > 10 for _, _, reason in found)


@pytest.mark.parametrize(
    ("where", "code"), [(w, c) for w, c, reason in examples() if reason is None]
)
def test_example_runs(where: str, code: str, tmp_path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code + "\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"{where}: {done.stderr[-3000:]}"
