"""Shared fixtures: tiny random models of each RoPE family, built in-process (no downloads)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings


# Two threads match the CI machine and keep test timings stable; under pytest-xdist (.ci/run
# runs two processes) the cores are shared out, so processes do not fight over them.
_PROCESSES = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ.setdefault("OMP_NUM_THREADS", str(max(1, min(2, (os.cpu_count() or 2) // _PROCESSES))))
# Nothing in the suite downloads: offline before anything imports `datasets` (which reads these
# once, at import), so a name that is not on disk fails at once instead of after the network's
# timeouts (24 s a test where the network is filtered), and the CLI's subprocesses inherit it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# How fast Hypothesis draws an input or runs an example measures the machine's load (two test
# processes on two cores), not the code: neither is what these tests check.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

#: Trained length of every tiny model: sequences past it exercise the extension.
TINY_LENGTH = 64
FAMILIES = ["llama", "mistral", "qwen2", "phi3"]


def default_sigint() -> None:
    """`preexec_fn` for a child the test will Ctrl-C: SIGINT back to its default disposition.

    A shell starts a background job (`.ci/run &`, `nohup`) with SIGINT ignored, its children
    inherit that, and Python then installs no KeyboardInterrupt handler: the child would ignore
    the test's SIGINT and the test would wait for it in vain.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tiny_config(family: str, **overrides: Any) -> Any:
    """A 2-layer, hidden-64 config of `family` with a trained length of 64 tokens."""
    import transformers

    classes = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "phi3": transformers.Phi3Config,
        # sliding-window layers beside a global one: the banded attention's model
        "gemma3": transformers.Gemma3TextConfig,
    }
    kwargs: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=128,
        max_position_embeddings=TINY_LENGTH,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    if family == "phi3":
        # Phi-3 variants rotate part of the head; cover the partial-rotary path here.
        kwargs["rope_parameters"]["partial_rotary_factor"] = 0.5
        # Phi3Config's own top-level field (default 4096) overrides the rope parameters'.
        kwargs["original_max_position_embeddings"] = TINY_LENGTH
    if family == "mistral":
        kwargs["sliding_window"] = None
    if family == "gemma3":
        kwargs.update(
            head_dim=16, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 100000.0},
            },
        )  # fmt: skip
    kwargs.update(overrides)
    return classes[family](**kwargs)


def build_tiny_model(family: str, seed: int = 0, **overrides: Any) -> Any:
    """A random tiny causal LM of `family` in fp32 eval mode, with weights fixed by `seed`."""
    import torch
    import transformers

    config = tiny_config(family, **overrides)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    ).eval()


@pytest.fixture
def tiny_model() -> Callable[..., Any]:
    """Factory fixture: ``tiny_model("llama", rope_parameters=...)``."""
    return build_tiny_model


def save_tiny_model_dir(path: Any, family: str = "llama", seed: int = 0, **overrides: Any) -> str:
    """A tiny model plus a word-level tokenizer (words ``w0 … w127``) saved as a model directory
    (`overrides` go to its config, e.g. a native ``rope_parameters``)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    model = build_tiny_model(family, seed=seed, **overrides)
    model.save_pretrained(path)
    vocab = {f"w{i}": i for i in range(128)}
    backend = Tokenizer(WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend).save_pretrained(path)
    return str(path)


def write_tiny_corpus(path: Any, n_docs: int = 3, words: int = 400, seed: int = 0) -> str:
    """A folder of .txt documents in the tiny tokenizer's vocabulary (with some structure)."""
    import random
    from pathlib import Path

    rng = random.Random(seed)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(n_docs):
        # a repeating phrase with noise: long-range structure a model can pick up
        phrase = [f"w{rng.randrange(3, 128)}" for _ in range(17)]
        text = " ".join(
            phrase[i % 17] if rng.random() < 0.8 else f"w{rng.randrange(3, 128)}"
            for i in range(words)
        )
        (folder / f"doc{d}.txt").write_text(text)
    return str(folder)


@pytest.fixture
def tiny_model_dir(tmp_path_factory: Any) -> str:
    """Path of a saved tiny Llama with its tokenizer."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny_corpus(tmp_path_factory: Any) -> str:
    """Path of a folder of tiny-vocabulary documents (400 tokens each)."""
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: Any) -> Any:
    """A real PostgreSQL database: `$LONGROPE_OPT_TEST_POSTGRES` (set by .ci/run), else a server
    started here with .ci/postgres.sh (Debian's binaries) and stopped after the session."""
    import os
    import socket
    import subprocess
    from pathlib import Path

    url = os.environ.get("LONGROPE_OPT_TEST_POSTGRES")
    if url:
        yield url
        return
    script = Path(__file__).resolve().parents[1] / ".ci" / "postgres.sh"
    import shutil
    import tempfile

    # Not under pytest's 0700 tmp dirs: the server runs as the `postgres` user when we are root.
    folder = Path(tempfile.mkdtemp(prefix="longrope-pg-"))
    folder.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = subprocess.run(
        ["bash", str(script), "start", str(folder), str(port)], capture_output=True, text=True
    )
    if started.returncode != 0:
        message = f"no PostgreSQL server for the tests: {started.stderr.strip()[-300:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + " (bash .ci/run installs and starts one)")
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run(["bash", str(script), "stop", str(folder)], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


# ----- no silent skips in CI ----------------------------------------------------------------------
# `.ci/run` sets LONGROPE_OPT_NO_SKIPS=1: a test that would skip there (a missing extra, no
# PostgreSQL server, no browser) means the environment is incomplete, so the run must fail.
_SKIPPED: list[str] = []


def _strict() -> bool:
    return os.environ.get("LONGROPE_OPT_NO_SKIPS") == "1"


def pytest_runtest_logreport(report: Any) -> None:
    if _strict() and report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append(f"{report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}")


def pytest_collectreport(report: Any) -> None:
    if _strict() and report.skipped:
        _SKIPPED.append(f"{report.nodeid}: {report.longrepr[-1] if report.longrepr else ''}")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _SKIPPED and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SKIPPED:
        terminalreporter.write_line(
            f"LONGROPE_OPT_NO_SKIPS=1: {len(_SKIPPED)} test(s) skipped, which fails this run:",
            red=True,
        )
        for line in _SKIPPED:
            terminalreporter.write_line(f"  {line}", red=True)
