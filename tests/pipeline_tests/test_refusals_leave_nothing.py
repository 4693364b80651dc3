"""Every subcommand, refused as a new user meets it: exit 2, one line on stderr, nothing created.

Each case runs in an empty folder (the current directory, where a relative `--storage`, the
default ``sqlite:///longrope.db`` and every default output land) and asserts that the folder is
still empty afterwards: a command checks its arguments before it opens storage, and a command
that only reads never creates a database.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from longrope_opt.cli import build_parser
from longrope_opt.cli import main
from tests.conftest import TINY_LENGTH
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny model, a corpus and a storage holding one real study, all outside the empty folder."""
    root = tmp_path_factory.mktemp("refusals")
    model = save_tiny_model_dir(root / "model")
    corpus = str(write_tiny_corpus(root / "corpus"))
    storage = f"sqlite:///{root / 'held.db'}"
    study = optuna.create_study(study_name="real", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return {"model": model, "corpus": corpus, "storage": storage}


def _cases(env: dict[str, str]) -> dict[str, list[str]]:
    model, corpus, held = env["model"], env["corpus"], env["storage"]
    inside = str(TINY_LENGTH // 2)  # a length inside the tiny model's trained window
    return {
        # extend: a target inside the window, budgets that cannot be, a bad trial count
        "extend inside the window": ["extend", model, "--to", inside, "--corpus", corpus],
        "extend budget typo": ["extend", model, "--to", "256", "--budget", "banana"],
        "extend budget zero": ["extend", model, "--to", "256", "--budget", "0s"],
        "extend trials zero": ["extend", model, "--to", "256", "--trials", "0"],
        "extend missing corpus": ["extend", model, "--to", "256", "--corpus", "no-such-dir/"],
        "extend missing held-out": ["extend", model, "--to", "256", "--corpus", corpus,
                                    "--held-out", "no-such-dir/"],
        "extend finetune zero": ["extend", model, "--to", "256", "--finetune", "0"],
        "extend missing finetune corpus": ["extend", model, "--to", "256", "--corpus", corpus,
                                           "--finetune", "2", "--finetune-corpus", "no-such/"],
        # search: a bad length and a missing base, each with a storage file in this folder
        "search length 3": ["search", "--model", model, "--corpus", corpus,
                            "--target-length", "3", "--storage", "sqlite:///s.db"],
        "search inside the window": ["search", "--model", model, "--corpus", corpus,
                                     "--target-length", inside, "--storage", "sqlite:///s.db"],
        "search unknown base study": ["search", "--model", model, "--corpus", corpus,
                                      "--target-length", "256", "--base", "study:nope",
                                      "--storage", "sqlite:///s.db"],
        "search no trials": ["search", "--model", model, "--n-trials", "0"],
        # the readers: missing storage files, unknown studies, lengths inside the window
        "validate missing storage": ["validate", "--study-name", "nope",
                                     "--storage", "sqlite:///none.db"],
        "validate default storage": ["validate", "--study-name", "nope"],
        "validate unknown study": ["validate", "--study-name", "nope", "--storage", held],
        "validate inside the window": ["validate", "--model", model, "--corpus", corpus,
                                       "--lengths", inside, "--classic", "pi",
                                       "--storage", "sqlite:///v.db"],
        "export missing storage": ["export", "--study-name", "nope", "--storage",
                                   "sqlite:///none.db", "-o", "f.json"],
        "export unknown study": ["export", "--study-name", "nope", "--storage", held,
                                 "-o", "f.json"],
        "eval missing storage": ["eval", "--study-name", "nope", "--storage", "sqlite:///none.db"],
        "eval unknown study": ["eval", "--model", model, "--study-name", "nope",
                               "--storage", held],
        "eval length zero": ["eval", "--lengths", "0"],
        "compare budget zero": ["compare", "--budget", "0", "--storage", "sqlite:///c.db"],
        "compare seeds zero": ["compare", "--seeds", "0", "--storage", "sqlite:///c.db"],
        "dashboard missing storage": ["dashboard", "--storage", "sqlite:///x.db"],
        "dashboard attach missing storage": ["dashboard", "--attach-only",
                                             "--storage", "journal:///x.log"],
        "worker missing storage": ["worker", "--study-name", "nope", "--storage",
                                   "sqlite:///w.db"],
        "worker unknown study": ["worker", "--study-name", "nope", "--storage", held],
        "finetune no steps": ["finetune", "--factors", "f.json", "--steps", "0", "-o", "ft"],
        "finetune missing factors": ["finetune", "--factors", "none.json", "-o", "ft"],
        "finetune missing storage": ["finetune", "--study-name", "nope", "--storage",
                                     "sqlite:///none.db", "-o", "ft"],
        "storage-server bad port": ["storage-server", "--storage", "sqlite:///ss.db",
                                    "--port", "0"],
        "storage-server proxy": ["storage-server", "--storage", "grpc://127.0.0.1:1"],
    }  # fmt: skip


def test_the_cases_walk_every_subcommand(env) -> None:
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # argparse keeps them there
    assert {argv[0] for argv in _cases(env).values()} == commands


@pytest.mark.parametrize("case", sorted(_cases({"model": "m", "corpus": "c", "storage": "s"})))
def test_a_refusal_is_one_line_and_leaves_the_folder_empty(
    case: str, env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("LONGROPE_OPT_STORAGE", raising=False)
    folder = tmp_path / "empty"
    folder.mkdir()
    monkeypatch.chdir(folder)
    code = main(_cases(env)[case])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("longrope-opt "), lines
    assert sorted(p.name for p in folder.iterdir()) == [], err


def test_a_budget_under_one_forward_forgets_the_study_it_made(
    env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # refused only once a forward is timed, so after the model loaded (its lines on stderr):
    # the study made for it and the database file it created are gone again
    monkeypatch.delenv("LONGROPE_OPT_STORAGE", raising=False)
    folder = tmp_path / "empty"
    folder.mkdir()
    monkeypatch.chdir(folder)
    argv = ["extend", env["model"], "--to", "256", "--corpus", env["corpus"], "--budget",
            "0.00001s", "--dtype", "float32", "--no-fuse"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "budget" in err[-1] and "one forward" in err[-1], err[-1]
    assert sorted(p.name for p in folder.iterdir()) == []
    # in a storage that exists, only the new study goes
    argv += ["--storage", env["storage"]]
    assert main(argv) == 2
    names = [s.study_name for s in optuna.get_all_study_summaries(env["storage"])]
    assert names == ["real"]


def test_a_refused_extend_never_deletes_a_study_it_did_not_make(
    env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an existing study of that name (a search's, say) stays, trials and all
    storage = f"sqlite:///{tmp_path / 'mine.db'}"
    mine = optuna.create_study(study_name="mine", storage=storage)
    mine.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    monkeypatch.chdir(tmp_path)
    argv = ["extend", env["model"], "--to", "256", "--corpus", env["corpus"], "--budget",
            "0.00001s", "--dtype", "float32", "--no-fuse", "--storage", storage,
            "--study-name", "mine"]  # fmt: skip
    main(argv)
    assert len(optuna.load_study(study_name="mine", storage=storage).trials) >= 2
