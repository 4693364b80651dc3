"""The guide "Extend a Llama-3.1-8B to 512k on a GPU" runs as written, made tiny.

Every ```bash block of docs/guides/llama3-512k.md runs in a shell, in order, with the 8B hub id
replaced by a tiny Llama with the ``llama3`` rope type saved to a directory (trained to 256
tokens, as Llama 3.1 is to 128k), 512k by 4 × 256, 2048k by 2 × that, an hour of GPU by four
trials on the CPU, and the text folders by tiny corpora. What the page says the commands print
and write is checked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "llama3-512k.md"
LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=4.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=64)  # fmt: skip
TRAINED = 256


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", PAGE.read_text(), re.S)


def _tiny(command: str, model: str) -> str:
    swaps = [
        ("meta-llama/Llama-3.1-8B", model),
        ("--to 512k", f"--to {4 * TRAINED}"),
        ("--to 2048k", f"--to {8 * TRAINED}"),
        ("--lengths 512k", f"--lengths {4 * TRAINED}"),
        ("--budget 1h", "--trials 4"),
        ("--keys 20", "--keys 2"),
        ("--device cuda", "--device cpu --dtype float32"),
    ]
    for old, new in swaps:
        command = command.replace(old, new)
    if command.lstrip().startswith("longrope-opt extend"):
        command += " --no-fuse"
    return command


@pytest.mark.slow
def test_the_guide_runs_on_a_tiny_llama3(tmp_path) -> None:
    blocks = _blocks()
    assert len(blocks) == 4
    model = save_tiny_model_dir(tmp_path / "tiny-llama3", max_position_embeddings=TRAINED,
                                rope_parameters=dict(LLAMA3))  # fmt: skip
    write_tiny_corpus(tmp_path / "books", n_docs=6, words=8 * TRAINED + 200, seed=1)
    write_tiny_corpus(tmp_path / "papers", n_docs=6, words=8 * TRAINED + 200, seed=2)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "LONGROPE_OPT_STORAGE": f"sqlite:///{tmp_path / 'guide.db'}", "MODEL": model}  # fmt: skip
    outputs = []
    for block in blocks:
        script = "set -e\n" + "\n".join(_tiny(line, model) for line in block.splitlines())
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, f"{block}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    # 1. the checkpoint as the page says: its rope type, its trained length, its factor count
    assert outputs[0].split() == ["llama3", str(TRAINED), "8"]
    # 2. the export composes llama3 × searched, and the report says what λ are relative to
    config = json.loads((tmp_path / "llama-512k" / "model" / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "longrope"
    assert config["longrope_opt"]["native"]["rope_type"] == "llama3"
    assert "llama3" in (tmp_path / "llama-512k" / "report.html").read_text()
    # 3. every row, the checkpoint itself included
    table = (tmp_path / "llama-512k" / "all-rows.txt").read_text()
    assert re.search(r"^none\s", table, re.M) and "yarn-cd" in table
    # 5. the second stage builds on the export: its trained length is the export's
    second = json.loads((tmp_path / "llama-2048k" / "model" / "config.json").read_text())
    assert second["longrope_opt"]["original_length"] == 4 * TRAINED
    assert second["longrope_opt"]["native"]["rope_type"] == "longrope"
