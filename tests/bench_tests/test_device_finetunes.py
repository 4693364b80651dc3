"""Run F of the device run (the 8x full fine-tunes) on the CPU: its commands are the real CLI's
and the fine-tuning script's recipe, its training text travels so that the same windows are
drawn from it, and it packs and prints what finished."""

from __future__ import annotations

import lzma
import re
import shlex
import tarfile
from pathlib import Path

import pytest
import torch

from bench.device import check
from bench.device import finetunes
from tests.conftest import save_tiny_model_dir
from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]


def _script_recipe() -> list[str]:
    """`experiments/finetune_8x.sh`'s ``common`` flags, as bash splits them."""
    script = (ROOT / "experiments" / "finetune_8x.sh").read_text()
    block = re.search(r"^common=\((.*?)\)", script, re.S | re.M)
    assert block is not None
    return shlex.split(block.group(1), comments=True)


def _pairs(flags: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, flag in enumerate(flags):
        if flag.startswith("--"):
            value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
            out[flag] = value
    return out


def test_run_f_trains_with_the_scripts_recipe_and_factors() -> None:
    script = _pairs(_script_recipe())
    # the same flags and values, less where the text is read and how often it is checkpointed
    assert _pairs(finetunes.F_RECIPE) == {
        k: v for k, v in script.items() if k not in {"--corpus", "--save-steps"}
    }
    assert script["--corpus"] == "perl-doc"  # what pack.py --train carries
    text = (ROOT / "experiments" / "finetune_8x.sh").read_text()
    factors = finetunes.F_RUNS["full-searched"][1]
    assert f"full searched yarn-cd --factors {factors}" in text and (ROOT / factors).is_file()
    assert (ROOT / finetunes.F_STORE).is_file()


def test_run_f_commands_are_the_clis_and_judge_each_pair_alike(tmp_path) -> None:
    from longrope_opt.cli import build_parser

    parser = build_parser()
    held, train = tmp_path / "prose", tmp_path / "train"
    commands = finetunes.run_f_commands(tmp_path, held, train)
    names = [name for name, _ in commands]
    assert names == ["full-searched", "full-yarn-cd", "4k pair", "64k pair", "full-pi",
                     "4k all", "64k all"]  # fmt: skip
    parsed = {name: parser.parse_args(cmd[3:]) for name, cmd in commands}
    runs = [parsed[n] for n in finetunes.F_RUNS]
    for field in ("steps", "learning_rate", "warmup_steps", "pose_tokens", "short_share", "seed",
                  "target_length", "corpus", "save_steps", "lora", "device"):  # fmt: skip
        assert len({str(getattr(r, field)) for r in runs}) == 1, field
    assert runs[0].corpus == str(train) and runs[0].lora is None and runs[0].device == "cuda"
    assert (runs[1].method, runs[2].method) == ("yarn-cd", "pi")
    for tag, models in (("pair", 2), ("all", 3)):
        short, long = parsed[f"4k {tag}"], parsed[f"64k {tag}"]
        assert short.lengths == "4096" and short.docs == 5 and short.keys == 0
        assert short.classic == "none" and len(short.models) == models
        assert long.lengths == "65536" and long.docs == 3 and long.keys == 20
        # the single form: the branched one needs the CPU's shared prefix
        assert long.passkey_form == "single" and long.study_name == [finetunes.F_STUDY]
        assert long.models == [str(tmp_path / n) for n in list(finetunes.F_RUNS)[:models]]
        assert short.corpus == long.corpus == str(held) and long.dtype == "bfloat16"
    assert parsed["64k all"].classic == "pi,yarn-cd"  # PI before fine-tuning beside its run


def test_the_carried_training_text_gives_the_same_windows(tmp_path) -> None:
    from bench.device.pack import TRAIN_SUFFIXES
    from bench.device.pack import copy_train
    from longrope_opt.data import TEXT_SUFFIXES
    from longrope_opt.data import load_samples
    from longrope_opt.models import load_tokenizer

    assert TRAIN_SUFFIXES == TEXT_SUFFIXES  # pack.py runs without the package: held equal here
    source = Path(write_tiny_corpus(tmp_path / "pod", n_docs=6, words=300))
    for i, doc in enumerate(sorted(source.iterdir())):  # a manual's mix of suffixes
        doc.rename(doc.with_suffix([".pod", ".txt", ".md"][i % 3]))
    (source / "notes.bin").write_bytes(b"\x00\x01")  # not text: neither side reads it
    carried = copy_train(source, tmp_path / "kit" / "train")
    assert [p.name for p in carried] == sorted(f"{p.name}.xz" for p in source.iterdir()
                                               if p.suffix != ".bin")  # fmt: skip
    restored = tmp_path / "stage" / "train-text"  # as entry.sh restores it
    restored.mkdir(parents=True)
    for packed in carried:
        (restored / packed.name[:-3]).write_bytes(lzma.decompress(packed.read_bytes()))
    tokenizer = load_tokenizer(save_tiny_model_dir(tmp_path / "model"))
    here = load_samples(str(source), tokenizer, 64, 8, seed=1, windows=2)
    there = load_samples(str(restored), tokenizer, 64, 8, seed=1, windows=2)
    assert [Path(d).name for d in here.doc_ids] == [Path(d).name for d in there.doc_ids]
    assert len(here) == 8 and all(torch.equal(a, b) for a, b in zip(here, there, strict=True))
    assert here.doc_hashes == there.doc_hashes  # what a study names the documents it read by


def test_run_f_packs_and_prints_what_finished(tmp_path, monkeypatch) -> None:
    (tmp_path / "out").mkdir()
    report = check.Report(tmp_path / "out")
    work = tmp_path / "work"
    ran: list[str] = []

    def fake_run(report, name, cmd, log, root, deadline=None) -> bool:
        ran.append(name)
        if name == "run F full-searched":  # what a finished run leaves: a record, no weights
            (work / "full-searched").mkdir()
            (work / "full-searched" / "config.json").write_text("{}")
            (work / "full-searched" / "model.safetensors").write_bytes(b"w")
            ckpt = work / "full-searched-checkpoints" / "checkpoint-128"
            ckpt.mkdir(parents=True)
            (ckpt / "trainer_state.json").write_text("{}")
        if name == "run F 64k pair":
            (work / "validate-64k-full-pair.txt").write_text("row ppl\nfull-searched 9.0\n")
            return False  # as a deadline stops it: nothing after it starts
        return True

    monkeypatch.setattr(finetunes, "_run", fake_run)
    finetunes.run_f(report, ROOT, tmp_path / "prose", tmp_path / "train", work=work)
    assert ran == ["run F full-searched", "run F full-yarn-cd", "run F 4k pair", "run F 64k pair"]
    with tarfile.open(tmp_path / "out" / "run-f.tar.gz") as tar:
        names = set(tar.getnames())
    assert names == {"extend-8x.db", "validate-64k-full-pair.txt", "full-searched/config.json",
                     "full-searched-checkpoints/checkpoint-128/trainer_state.json"}  # fmt: skip
    assert "full-searched 9.0" in (tmp_path / "out" / "table.txt").read_text()
    # the committed store is copied, never written
    assert (work / "extend-8x.db").read_bytes() == (ROOT / finetunes.F_STORE).read_bytes()


def test_run_f_without_its_text_is_refused_before_anything_loads(tmp_path, monkeypatch,
                                                                 capsys) -> None:  # fmt: skip
    monkeypatch.setattr(check, "prepare", lambda report: pytest.fail("loaded before checking"))
    (tmp_path / "prose").mkdir()
    (tmp_path / "prose" / "book.txt").write_text("a book\n")
    monkeypatch.setattr("sys.argv", ["check", "--out", str(tmp_path), "--runs", "correctness,f",
                                     "--held-out", str(tmp_path / "prose")])  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        check.main()
    assert exit_.value.code == 2
    assert "--runs f needs --train-text and --held-out" in capsys.readouterr().err
