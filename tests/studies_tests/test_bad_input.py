"""Every bad input: one line on stderr, exit code 2, no traceback, and the study exactly as it was.

One study is created first; each case then runs a command against the same storage and checks
the message, the exit code and a snapshot of every trial (number, state, params, value).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
import torch

from longrope_opt.cli import main
from longrope_opt.objectives import OBJECTIVES
from longrope_opt.studies import record
from tests.conftest import build_tiny_model
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)
FACTORS_OK = [1.0, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    tiny_model_dir = save_tiny_model_dir(root / "model")
    tiny_corpus = write_tiny_corpus(root / "corpus")
    storage = f"sqlite:///{root / 's.db'}"
    gpt2 = root / "gpt2"
    from transformers import GPT2Config
    from transformers import GPT2LMHeadModel

    GPT2LMHeadModel(
        GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=128, n_positions=512)
    ).save_pretrained(gpt2)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # a loadable, non-RoPE model
        (gpt2 / name).write_bytes((Path(tiny_model_dir) / name).read_bytes())
    other = save_tiny_model_dir(root / "other", seed=1)
    base = [
        "--corpus", str(tiny_corpus), "--samples", "2", "--dtype", "float32", "--no-fuse",
        "--storage", storage, "--study-name", "t",
    ]  # fmt: skip
    evo = ["--population-size", "4", "--num-mutations", "2", "--num-crossovers", "2",
           "--num-parents", "2"]  # fmt: skip
    ok = ["search", "--model", str(tiny_model_dir), *base, "--target-length", "256", *evo]
    assert main([*ok, "--n-trials", "4"]) == 0
    files = {}
    for name, content in {
        "short": {"factors": [1.0, 2.0, 3.0]},
        "nonmono": {"factors": [1.0, 2.0, 1.5, 3.0, 3.0, 3.0, 3.0, 3.0]},
        "negative": {"factors": [1.0, -2.0, *FACTORS_OK[2:]]},
        "nan": {"factors": [1.0, math.nan, *FACTORS_OK[2:]]},
        "nhat": {"factors": FACTORS_OK, "n_hat": -3},
    }.items():
        path = root / f"{name}.json"
        path.write_text(json.dumps(content))  # json writes NaN as a bare NaN token
        files[name] = str(path)
    return {"ok": ok, "storage": storage, "gpt2": str(gpt2), "other": other, "files": files,
            "model": str(tiny_model_dir), "corpus": str(tiny_corpus), "evo": evo}  # fmt: skip


def _snapshot(storage: str) -> list[tuple]:
    study = optuna.load_study(study_name="t", storage=storage)
    return [(t.number, t.state, t.params, t.values) for t in study.get_trials()]


def _case(env, name: str) -> list[str]:
    ok, f = env["ok"], env["files"]
    evaluate = ["eval", "--model", env["model"], "--corpus", env["corpus"], "--samples", "1",
                "--dtype", "float32", "--no-fuse", "--lengths", "128", "--methods", "none"]  # fmt: skip
    swap = {
        "non-rope model": ("--model", env["gpt2"]),
        "target <= trained": ("--target-length", "64"),
        "samples shorter than target": ("--target-length", "4096"),
        "unknown corpus path": ("--corpus", "/no/such/folder"),
        "unknown corpus dataset": ("--corpus", "no_such_dataset_xyz"),
        "malformed storage url": ("--storage", "not-a-url"),
        "unreachable database": ("--storage", "postgresql://u@127.0.0.1:1/nodb"),
        "unreachable proxy": ("--storage", "grpc://127.0.0.1:1"),
        "proxy url without a port": ("--storage", "grpc://proxy-host"),
        "journal in a missing folder": ("--storage", "journal:////no/such/folder/s.log"),
        "other target length": ("--target-length", "320"),
        "other model": ("--model", env["other"]),
    }
    if name in swap:
        flag, value = swap[name]
        args = list(ok)
        args[args.index(flag) + 1] = value
        return [*args, "--n-trials", "8"]
    return {
        "unknown objective": [*ok, "--n-trials", "8", "--objective", "nope"],
        "unknown sampler": [*ok, "--n-trials", "8", "--sampler", "nope"],
        "n_hat outside its set": [*ok, "--n-trials", "8", "--n-hat", "256"],
        "other n_hat setting": [*ok, "--n-trials", "8", "--n-hat", "4"],
        "factors wrong length": [*evaluate, "--factors", f["short"]],
        "factors non-monotone": [*evaluate, "--factors", f["nonmono"]],
        "factors negative": [*evaluate, "--factors", f["negative"]],
        "factors NaN": [*evaluate, "--factors", f["nan"]],
        "factors n_hat negative": [*evaluate, "--factors", f["nhat"]],
        "worker unknown study": ["worker", "--storage", env["storage"], "--study-name", "nope"],
        "export from a missing journal": ["export", "--storage", "journal:///no-such.log",
                                          "--study-name", "t"],  # fmt: skip
        "storage-server port": ["storage-server", "--storage", env["storage"], "--port", "70000"],
        "storage-server of a proxy": ["storage-server", "--storage", "grpc://127.0.0.1:9",
                                      "--port", "13001"],  # fmt: skip
        "negative seed": [*ok, "--n-trials", "8", "--seed", "-1"],
        "negative timeout": [*ok, "--n-trials", "8", "--timeout", "-1"],
        "empty study name": [*ok, "--n-trials", "8", "--study-name", ""],
        "unknown sampler, close": [*ok, "--n-trials", "8", "--sampler", "tpee"],
        "critical above, full space": [*ok, "--n-trials", "8", "--critical-above", "0"],
        "critical above negative": [*ok, "--n-trials", "8", "--space", "critical",
                                    "--critical-above", "-1"],  # fmt: skip
    }[name]


CASES = {
    "non-rope model": "`--model` of type 'gpt2' has no rotary position embedding",
    "target <= trained": "`--target-length` must be > the trained length 64, got 64 (for short factors within the window, set `--recovery`)",
    "samples shorter than target": "has 0 document(s) of >= 4096 tokens, need k=2",
    "unknown corpus path": "`--corpus` path '/no/such/folder' does not exist",
    "unknown corpus dataset": "could not read `--corpus` dataset 'no_such_dataset_xyz'",
    "unknown objective": f"unknown objective 'nope' for `--objective`; available: {', '.join(sorted(OBJECTIVES))}",
    "unknown sampler": "unknown sampler 'nope' for `--sampler` (did you mean 'ngopt'?); available: cma, cmaes",
    "malformed storage url": "`--storage` must be a storage URL such as sqlite:///longrope.db",
    "unreachable database": "cannot open `--storage`",
    "unreachable proxy": "cannot reach the storage proxy at 127.0.0.1:1 within 15 s",
    "proxy url without a port": "`--storage` 'grpc://proxy-host' must be grpc://host:port",
    "journal in a missing folder": "cannot write `--storage` journal file '/no/such/folder/s.log'",
    "export from a missing journal": "`--storage` file 'no-such.log' does not exist",
    "storage-server port": "`--port` must be in [1, 65535], got 70000",
    "storage-server of a proxy": "`--storage` must be a database or a journal file to serve",
    "other target length": "was created with `--target-length` 256; this run has 320",
    "other model": "was created with `--model` ",
    "n_hat outside its set": "`--n-hat` must be in [0, target_length = 256), got 256",
    "other n_hat setting": "was created with `--n-hat` 'search'; this run has 4",
    "factors wrong length": "`--factors` must have length rotary_dim // 2 = 8",
    "factors non-monotone": "must be non-decreasing; first violation at index 2",
    "factors negative": "`--factors` must be finite and > 0; got -2.0 at index 1",
    "factors NaN": "`--factors` must be finite and > 0; got nan at index 1",
    "factors n_hat negative": "`n_hat` must be an integer >= 0",
    "worker unknown study": "`--study-name` 'nope' not found",
    "negative seed": "`--seed` must be an integer >= 0, got -1",
    "negative timeout": "`--timeout` must be >= 0 seconds, got -1.0",
    "empty study name": "`--study-name` must not be empty",
    "unknown sampler, close": "unknown sampler 'tpee' for `--sampler` (did you mean 'tpe'?)",
    "critical above, full space": "`--critical-above` needs `--space` 'critical', got `--space` 'full'",
    "critical above negative": "`--critical-above` must be an integer >= 0, got -1",
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_one_line_exit_2_study_unchanged(env, name: str, capfd) -> None:
    before = _snapshot(env["storage"])
    capfd.readouterr()
    assert main(_case(env, name)) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    # Loading progress lines are allowed; the error itself is one line and there is no traceback.
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1, err
    assert CASES[name] in errors[0]
    assert not any("Traceback" in line for line in err)
    assert _snapshot(env["storage"]) == before


def test_out_of_memory_fails_the_trial_and_the_search_goes_on(tmp_path, monkeypatch) -> None:
    from longrope_opt import RopeSpec
    from longrope_opt.objectives import PerplexityObjective
    from longrope_opt.objectives import _perplexity_objective as _objective
    from longrope_opt.space import SearchSpace

    model = build_tiny_model("llama")
    space = SearchSpace(RopeSpec.from_config(model.config), 128)
    samples = [torch.randint(3, 128, (128,), generator=torch.Generator().manual_seed(0))]
    real = _objective.evaluate_perplexity

    def sometimes_oom(*args, **kwargs):  # the 2nd evaluation runs out of memory
        sometimes_oom.calls += 1
        if sometimes_oom.calls == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(*args, **kwargs)

    sometimes_oom.calls = 0
    monkeypatch.setattr(_objective, "evaluate_perplexity", sometimes_oom)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'oom.db'}")
    study.optimize(PerplexityObjective(model, samples, space=space), n_trials=4)
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert states.count(optuna.trial.TrialState.COMPLETE) == 3
    failed = study.trials[1]
    assert failed.user_attrs["failure"].startswith("out of memory: CUDA out of memory")
    # the patch was undone: the model evaluates as before
    assert study.trials[2].value is not None and math.isfinite(study.trials[2].value)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "--study-name", "t", "-o", "{tmp}/f.json"],
        ["eval", "--study-name", "t", "--model", "{model}", "--lengths", "128"],
        ["dashboard", "--attach-only"],
        ["worker", "--study-name", "t"],
    ],
    ids=["export", "eval", "dashboard", "worker"],
)
def test_read_only_commands_do_not_create_databases(env, argv, tmp_path, capfd) -> None:
    missing = tmp_path / "typo.db"
    args = [a.format(tmp=tmp_path, model=env["model"]) for a in argv]
    assert main([*args, "--storage", f"sqlite:///{missing}"]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and f"`--storage` file '{missing}' does not exist" in err[0]
    assert not missing.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--storage", "sqlite://"], "is an in-memory database"),
        (["--storage", "sqlite:///:memory:"], "is an in-memory database"),
        (["--heartbeat-interval", "-1"], "`--heartbeat-interval` must be >= 0 seconds"),
    ],
)
def test_storage_settings_that_would_lose_work(env, extra, message, capfd) -> None:
    before = _snapshot(env["storage"])
    capfd.readouterr()
    assert main([*env["ok"], "--n-trials", "8", *extra]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and message in err[0]
    assert _snapshot(env["storage"]) == before


def test_a_worker_started_elsewhere_finds_relative_paths(env, tmp_path, monkeypatch) -> None:
    import shutil

    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(env["model"], work / "model")
    shutil.copytree(env["corpus"], work / "corpus")
    storage = f"sqlite:///{tmp_path / 'rel.db'}"
    monkeypatch.chdir(work)
    assert main(["search", "--model", "model", "--corpus", "corpus", "--samples", "2",
                 "--dtype", "float32", "--no-fuse", "--storage", storage, "--study-name", "rel",
                 "--target-length", "256", *env["evo"], "--n-trials", "4"]) == 0  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `model` and `corpus` mean nothing here
    assert main(["worker", "--storage", storage, "--study-name", "rel", "--n-trials", "6",
                 "--dtype", "float32", "--no-fuse", "--heartbeat-interval", "0"]) == 0  # fmt: skip
    study = optuna.load_study(study_name="rel", storage=storage)
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert len(study.get_trials(states=finished)) == 6
    config = study.user_attrs["longrope_opt:search_config"]
    assert config["model"] == str(work / "model") and config["corpus"] == str(work / "corpus")


def _one_error(capfd) -> str:
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr
    err = [line for line in stderr.splitlines() if "error:" in line]
    assert len(err) == 1, err
    return err[0]


def test_outputs_are_checked_before_any_model_loads(env, tmp_path, capfd, monkeypatch) -> None:
    import longrope_opt.models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the output was checked")

    monkeypatch.setattr(longrope_opt.models, "load_model", no_loading)
    (tmp_path / "file.json").write_text("{}")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    factors = tmp_path / "f.json"
    factors.write_text(json.dumps({"factors": FACTORS_OK, "target_length": 256}))
    evaluate = ["eval", "--model", env["model"], "--corpus", env["corpus"], "--lengths", "128"]
    finetune = ["finetune", "--model", env["model"], "--corpus", env["corpus"], "--factors",
                str(factors), "--steps", "1"]  # fmt: skip
    export = ["export", "--storage", env["storage"], "--study-name", "t"]
    compare = ["compare", "--model", env["model"], "--corpus", env["corpus"], "--storage",
               f"sqlite:///{tmp_path / 'cmp.db'}", "--samplers", "random", "--budget", "1"]
    cases = {
        "compare's plot into a missing folder": ([*compare, "--html", str(tmp_path / "no/c.html")],
                                                 "does not exist; create it first"),
        "compare's plot onto a folder": ([*compare, "--html", str(tmp_path / "full")],
                                         "is a directory; give a file name"),
        "eval into a missing folder": ([*evaluate, "--output", str(tmp_path / "no/sub/table")],
                                       "does not exist; create it first"),
        "finetune onto a file": ([*finetune, "-o", str(tmp_path / "file.json")],
                                 "is an existing file, not a directory"),
        "finetune into a full folder": ([*finetune, "-o", str(tmp_path / "full")],
                                        "exists and is not empty; choose a new directory or pass `--overwrite`"),
        "finetune over its own model": ([*finetune, "-o", env["model"], "--overwrite"],
                                        "is the source model's own directory"),
        "export json into a missing folder": ([*export, "-o", str(tmp_path / "no/f.json")],
                                              "does not exist; create it first"),
        "export into a full folder": ([*export, "-o", str(tmp_path / "x.json"), "--model-dir",
                                       str(tmp_path / "full")], "exists and is not empty"),
        "export over the source model": ([*export, "-o", str(tmp_path / "x.json"), "--model-dir",
                                          env["model"], "--model", env["model"], "--overwrite"],
                                         "is the source model's own directory"),
    }  # fmt: skip
    before = sorted(p.name for p in tmp_path.rglob("*"))
    model_files = {p.name: p.read_bytes() for p in Path(env["model"]).iterdir()}
    for name, (argv, message) in cases.items():
        capfd.readouterr()
        assert main(argv) == 2, name
        assert message in _one_error(capfd), name
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert {p.name: p.read_bytes() for p in Path(env["model"]).iterdir()} == model_files


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mode", "skip", "--skip-chunks", "1"], "`--skip-chunks` must be an integer >= 2, got 1"),
        (["--mode", "skip", "--skip-tokens", "2000"], "`--skip-tokens` must be in [2 x `--skip-chunks` = 4, `--target-length` = 256], got 2000"),
        (["--skip-chunks", "0", "--mode", "skip"], "`--skip-chunks` must be an integer >= 2, got 0"),
    ],
)  # fmt: skip
def test_compare_settings_fail_before_any_study_is_written(env, tmp_path, argv, message, capfd) -> None:
    storage = f"sqlite:///{tmp_path / 'cmp.db'}"
    code = main(["compare", "--model", env["model"], "--corpus", env["corpus"], "--samples", "2",
                 "--dtype", "float32", "--no-fuse", "--storage", storage, "--target-length", "256",
                 "--budget", "4", "--seeds", "1", "--samplers", "random", "--html",
                 str(tmp_path / "c.html"), *argv])  # fmt: skip
    assert code == 2 and message in _one_error(capfd)
    assert optuna.get_all_study_summaries(storage) == []  # the corrected rerun is not refused


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lambda-max", "0.9"], "`--lambda-max` must be > 1.0 (the lowest λ), got 0.9"),
        (["--n-hat", "x"], "`--n-hat` must be 'search' or an integer >= 0, got 'x'"),
        (["--attention", "hot"], "`--attention` must be 'search', one of"),
        (["--population-size", "1"], "`--population-size` must be an integer >= 3, got 1"),
        (["--mutation-prob", "0"], "`--mutation-prob` must be in (0, 1], got 0.0"),
    ],
)
def test_search_messages_name_the_flags(env, argv, message, capfd) -> None:
    before = _snapshot(env["storage"])
    capfd.readouterr()
    assert main([*env["ok"], "--n-trials", "8", "--study-name", "other", *argv]) == 2
    assert message in _one_error(capfd)
    assert _snapshot(env["storage"]) == before


def _bad_model_dirs(root: Path, tiny_model_dir: str) -> dict[str, str]:
    unknown = root / "unknown-type"
    unknown.mkdir(exist_ok=True)
    (unknown / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (unknown / name).write_bytes((Path(tiny_model_dir) / name).read_bytes())
    no_tok = root / "no-tokenizer"
    no_tok.mkdir(exist_ok=True)
    (no_tok / "config.json").write_bytes((Path(tiny_model_dir) / "config.json").read_bytes())
    fake = root / "weights.gguf"
    fake.write_bytes(b"PK\x03\x04 not a gguf file")
    return {"unknown": str(unknown), "no_tok": str(no_tok), "fake_gguf": str(fake)}


def test_inputs_fail_before_the_weights_load(env, tmp_path, capfd, monkeypatch) -> None:
    import longrope_opt.models

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the input was checked")

    bad = _bad_model_dirs(tmp_path, env["model"])
    f = env["files"]
    words = tmp_path / "words.json"
    words.write_text(json.dumps({"factors": ["a", "b", *FACTORS_OK[2:]]}))
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"factors": [*FACTORS_OK[:-1], 1e30]}))
    binary = tmp_path / "corpus-bin"
    binary.mkdir()
    (binary / "doc.txt").write_bytes(bytes(range(256)) * 64)
    evaluate = ["eval", "--model", env["model"], "--corpus", env["corpus"], "--samples", "1",
                "--dtype", "float32", "--no-fuse", "--lengths", "128", "--methods", "none"]  # fmt: skip
    ok = env["ok"]
    cases = {
        # 2. validate before the model loads (the trained length comes from the config)
        "target <= trained, from the config": ([*ok, "--n-trials", "8", "--study-name", "n",
                                                "--target-length", "32"], "must be > the trained length 64"),
        "factors of the wrong length": ([*evaluate, "--factors", f["short"]],
                                        "`--factors` must have length rotary_dim // 2 = 8"),
        "sliding without a stride": ([*evaluate, "--mode", "sliding"], "`--stride` must be an integer >= 1"),
        "eval of a missing study": ([*evaluate, "--storage", env["storage"], "--study-name", "nope"],
                                    "`--study-name` 'nope' not found"),
        "a mistyped corpus path": ([*evaluate[:4], "/no/such/corpus", *evaluate[5:]],
                                   "`--corpus` path '/no/such/corpus' does not exist"),
        "search on a mistyped corpus": ([*ok[:4], str(Path(env["corpus"]) / "nope"), *ok[5:],
                                         "--n-trials", "8", "--study-name", "n"], "does not exist"),
        # 5. one line for every exception a user can cause
        "factor values that are not numbers": ([*evaluate, "--factors", str(words)],
                                               "`--factors` must be a 1-D sequence of numbers"),
        "no methods": ([*evaluate[:-2], "--methods", ""], "`--methods` must name at least one method"),
        "a .gguf that is not GGUF": ([*evaluate[:2], bad["fake_gguf"], *evaluate[3:]], "is not a GGUF file"),
        "a model directory without a tokenizer": ([*evaluate[:2], bad["no_tok"], *evaluate[3:]],
                                                  "has no tokenizer"),
        # 7. silent surprises made loud
        "a factor of 1e30": ([*evaluate, "--factors", str(huge)], "`--factors` values must be <= 10000"),
        "a negative document seed": ([*evaluate, "--seed", "-1"], "`--seed` must be an integer >= 0, got -1"),
        "a search with a negative seed": ([*ok, "--n-trials", "8", "--study-name", "n", "--seed", "-2"],
                                          "`--seed` must be an integer >= 0, got -2"),
    }  # fmt: skip
    monkeypatch.setattr(longrope_opt.models, "load_model", no_loading)
    before = _snapshot(env["storage"])
    for name, (argv, message) in cases.items():
        capfd.readouterr()
        assert main(argv) == 2, name
        assert message in _one_error(capfd), name
    assert _snapshot(env["storage"]) == before
    assert "n" not in [s.study_name for s in optuna.get_all_study_summaries(env["storage"])]
    monkeypatch.undo()
    # These need the loader itself to find out (transformers reads the file).
    for argv, message in [
        ([*evaluate[:2], bad["unknown"], *evaluate[3:]], "no_such_architecture"),
        ([*evaluate[:4], str(binary), *evaluate[5:]], "is binary, not text"),
    ]:
        capfd.readouterr()
        assert main(argv) == 2, argv
        assert message in _one_error(capfd)


def test_devices_this_machine_lacks_or_that_do_not_exist(env, tmp_path, capfd) -> None:
    import torch

    factors = tmp_path / "f.json"
    factors.write_text(json.dumps({"factors": FACTORS_OK, "target_length": 256}))
    base = ["finetune", "--model", env["model"], "--corpus", env["corpus"], "--factors",
            str(factors), "--steps", "1", "-o", str(tmp_path / "out")]  # fmt: skip
    cases = [("gpu0", "`--device` must be auto, cpu, cuda or cuda:N, got 'gpu0'")]
    if not torch.cuda.is_available():  # the CI machines: no CUDA
        cases.append(("cuda", "`--device` 'cuda' needs CUDA, and torch sees none here"))
    for device, message in cases:
        capfd.readouterr()
        assert main([*base, "--device", device]) == 2
        assert message in _one_error(capfd)
    assert not (tmp_path / "out").exists()


def test_dashboard_on_a_busy_port_or_an_unknown_host(env, capfd) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["dashboard", "--storage", env["storage"], "--port", str(port)]) == 2
        assert f"`--port` {port} on '127.0.0.1' cannot be used" in _one_error(capfd)
    assert main(["dashboard", "--storage", env["storage"], "--host", "no-such-host.invalid"]) == 2
    assert "`--host` 'no-such-host.invalid' does not resolve" in _one_error(capfd)


def test_a_lower_n_trials_warns_and_keeps_the_total(env, capfd) -> None:
    study = optuna.load_study(study_name="t", storage=env["storage"])
    total = record.read_total(study)
    capfd.readouterr()
    assert main([*env["ok"], "--n-trials", "2"]) == 0
    err = capfd.readouterr().err
    assert f"`--n-trials` 2 is below study 't''s total of {total} trials" in err
    study = optuna.load_study(study_name="t", storage=env["storage"])
    assert record.read_total(study) == total
    assert study.metric_names == ["perplexity"]  # named for the dashboard, not "Objective 0"


def test_the_library_logs_instead_of_printing(env, capfd, caplog) -> None:
    import logging

    from longrope_opt.models import load_model

    root = logging.getLogger("longrope_opt")
    cli_handlers = [h for h in root.handlers if type(h).__name__ == "_StderrHandler"]
    for handler in cli_handlers:  # as in a notebook or a worker pool: no CLI handler
        root.removeHandler(handler)
    try:
        capfd.readouterr()
        with caplog.at_level(logging.INFO, logger="longrope_opt"):
            load_model(env["model"], dtype="float32")
        assert "[longrope-opt]" not in capfd.readouterr().err  # nothing printed
        assert any("loading" in r.getMessage() for r in caplog.records)  # logged instead
        with caplog.at_level(logging.WARNING, logger="longrope_opt"):
            caplog.clear()
            load_model(env["model"], dtype="float32")
        assert not caplog.records  # a WARNING level silences the loading lines
    finally:
        for handler in cli_handlers:
            root.addHandler(handler)
