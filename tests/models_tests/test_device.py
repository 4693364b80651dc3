"""Device branches, tested on a CPU machine with `torch.cuda`'s answers patched where a GPU
would answer: nothing here pretends to run a CUDA kernel."""

from __future__ import annotations

import optuna
import pytest
import torch

from longrope_opt.cli import main
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.models import _device
from longrope_opt.models import choose_attention
from longrope_opt.models import cuda_path
from longrope_opt.models import peak_memory_mb
from longrope_opt.models import resolve_device
from longrope_opt.studies import record


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_device_resolution_without_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    for device in ("cuda", "cuda:0"):
        with pytest.raises(InvalidArgumentError, match=r"needs CUDA, and torch sees none here"):
            resolve_device(device)
    for bad in ("gpu", "cuda:x", "CPU", "cuda:", "", "mps"):
        with pytest.raises(InvalidArgumentError, match=r"must be auto, cpu, cuda or cuda:N"):
            resolve_device(bad)


def test_device_resolution_with_two_gpus(two_gpus) -> None:
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(InvalidArgumentError, match=r"this machine has 2 CUDA device\(s\)"):
        resolve_device("cuda:2")


def test_cuda_dtype_is_bf16_where_supported(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert cuda_path("cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)  # pre-Ampere
    assert cuda_path("cuda") == "float16"


def test_attention_choice_and_fallbacks(monkeypatch) -> None:
    class Supports:
        _supports_flash_attn = True

    class Lacks:
        _supports_flash_attn = False

    monkeypatch.setattr(_device, "flash_attention_installed", lambda: False)
    assert choose_attention("cpu", None) == "sdpa"
    assert choose_attention("cuda", None) == "sdpa"  # not installed: SDPA, silently
    assert choose_attention("cpu", "eager") == "eager"
    with pytest.raises(InvalidArgumentError, match=r"needs a CUDA device, got `device` 'cpu'"):
        choose_attention("cpu", "flash_attention_2")
    with pytest.raises(InvalidArgumentError, match=r"needs flash-attn: pip install"):
        choose_attention("cuda", "flash_attention_2")
    monkeypatch.setattr(_device, "flash_attention_installed", lambda: True)
    assert choose_attention("cuda", None, Supports) == "flash_attention_2"
    assert choose_attention("cuda", None, Lacks) == "sdpa"
    assert choose_attention("cuda:1", "flash_attention_2", Supports) == "flash_attention_2"
    with pytest.raises(InvalidArgumentError, match=r"Lacks does not support flash-attn"):
        choose_attention("cuda", "flash_attention_2", Lacks)


def test_peak_memory_is_only_counted_on_cuda() -> None:
    assert peak_memory_mb(torch.device("cpu")) is None
    assert peak_memory_mb("cpu") is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--device", "cuda"], "`--device` 'cuda' needs CUDA"),
        (["--device", "tpu"], "`--device` must be auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["--attn", "flash_attention_2", "--device", "cpu"], "needs a CUDA device"),
    ],
)
def test_search_refuses_a_device_before_writing_anything(
    tiny_model_dir, tiny_corpus, tmp_path, extra, message, capfd
) -> None:
    if torch.cuda.is_available() and extra[1] == "cuda":
        pytest.skip("this machine has CUDA")  # (never on the CI machines, which have none)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    code = main(["search", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--storage",
                 storage, "--target-length", "256", "--n-trials", "2", *extra])  # fmt: skip
    err = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not (tmp_path / "s.db").exists() or optuna.get_all_study_summaries(storage) == []


def test_cpu_search_records_its_device(tiny_model_dir, tiny_corpus, tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["search", "--model", tiny_model_dir, "--corpus", tiny_corpus, "--storage",
                 storage, "--study-name", "d", "--target-length", "256", "--n-trials", "4",
                 "--population-size", "4", "--num-mutations", "2", "--num-crossovers", "2",
                 "--num-parents", "2", "--dtype", "float32", "--no-fuse", "--device", "cpu",
                 "--samples", "2"]) == 0  # fmt: skip
    study = optuna.load_study(study_name="d", storage=storage)
    compute = record.read_provenance(study)["compute"]
    assert compute["device"] == "cpu" and compute["path"] == "float32"
    assert all("peak_gpu_memory_mb" not in t.user_attrs for t in study.trials)


def test_gpu_check_exits_2_with_one_line_without_cuda() -> None:
    import subprocess
    import sys
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")  # (never on the CI machines, which have none)
    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"gpu_check: error: needs a CUDA GPU, and torch sees none here (torch {torch.__version__})."
    ]
