"""Run F of the device run: the 8× fine-tuned comparison's full pair (and PI) at GPU speed.

On a 2-core CPU a full fine-tune of SmolLM2-135M at 8× (128 steps of 8k real tokens spread to
64k) takes 3.4 hours and its validation 1.7 more: longer than a sitting, and its checkpoint (the
whole model and its optimizer moments, 1.6 GB) cannot be carried to the next one. On a GPU it is
minutes. So run F trains what `experiments/finetune_8x.sh` trains with the same recipe (its
``common`` flags: the same Perl manual windows in the same order, seed, steps and schedule; a
test holds the two equal), with full fine-tuning as the paper does it: the CPU 8× winner's
factors, YaRN-cd, then PI. Each pair is then judged as the script judges it: at 64k on the 8×
table's held-out books beside the rows measured before fine-tuning (read from a copy of the 8×
study's store, `experiments/results/extend-8x-cpu.db`: the books that study read are left out
by their whole text's hash, so the kit carries the books whole), with 20 passkeys a row; at 4k
against the base model. The passkeys are the paper's single-key prompts: the branched form the
CPU tables use needs the CPU's shared prefix, so on the card every row's keys, those before
fine-tuning too, are measured in the single form (a 64k forward a key, a fraction of a second
there); the perplexities before fine-tuning come from the store.

The training text travels in the kit (``pack.py --train``: Debian's perl-doc is not on the lent
machine), as the same files under the same names, so `load_samples` draws the same windows from
it as from ``--corpus perl-doc`` here.

Everything lands in OUT as ``run-f.tar.gz`` (tables, stores, each run's record and loss log;
no weights), whatever the deadline left finished.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bench.device.searches import CLI
from bench.device.searches import KEYS
from bench.device.searches import _pack
from bench.device.searches import _run


#: `experiments/finetune_8x.sh`'s ``common`` flags, less where it reads its text (``--corpus``,
#: here the carried folder) and how often it checkpoints (``--save-steps``: a sitting's end on
#: the CPU; here a checkpoint every 8 steps would write 26 GB a run for nothing).
F_RECIPE = ["--steps", "128", "--learning-rate", "2e-5", "--warmup-steps", "10",
            "--pose-tokens", "8192", "--short-share", "0.2", "--seed", "1",
            "--target-length", "65536", "--no-gradient-checkpointing"]  # fmt: skip
#: Full fine-tuning's runs, each with what sets its RoPE: the searched pair first (a call cut
#: short still answers the issue), then PI, the paper's fine-tuning baseline.
F_RUNS = {
    "full-searched": ["--factors", "experiments/results/extend-8x-cpu-factors.json"],
    "full-yarn-cd": ["--method", "yarn-cd"],
    "full-pi": ["--method", "pi"],
}
#: The 8× study whose rows before fine-tuning the 64k tables sit beside.
F_STUDY, F_STORE = "extend-smollm2-135m-65536", "experiments/results/extend-8x-cpu.db"
#: Held-out documents at 64k (the 8× table's three) and at 4k.
F_DOCS_LONG, F_DOCS_SHORT = 3, 5
F_WORK = Path("/tmp/longrope-run-f")


def run_f_commands(work: Path, held_out: Path, train: Path,
                   device: str = "cuda") -> list[tuple[str, list[str]]]:  # fmt: skip
    """``(name, command)`` of run F in order: the searched and YaRN-cd fine-tunes, their 4k and
    64k tables, then PI's fine-tune and the tables of all three (what is stored is reused)."""
    names = list(F_RUNS)
    commands = [(name, _train(name, work, train, device)) for name in names[:2]]
    commands += _judge("pair", names[:2], ["yarn-cd"], work, held_out, device)
    commands.append((names[2], _train(names[2], work, train, device)))
    commands += _judge("all", names, ["pi", "yarn-cd"], work, held_out, device)
    return commands


def _train(name: str, work: Path, train: Path, device: str) -> list[str]:
    return [*CLI, "finetune", *F_RUNS[name], *F_RECIPE, "--corpus", str(train),
            "--save-steps", "64", "--device", device, "--output", str(work / name)]  # fmt: skip


def _judge(tag: str, names: list[str], classic: list[str], work: Path, held_out: Path,
           device: str) -> list[tuple[str, list[str]]]:  # fmt: skip
    models = [a for name in names for a in ("--models", str(work / name))]
    common = ["--corpus", str(held_out), "--dtype", "bfloat16", "--device", device, *models]
    short = [*CLI, "validate", "--model", "smollm2-135m", "--classic", "none",
             "--storage", f"sqlite:///{work / 'measurements.db'}", "--docs", str(F_DOCS_SHORT),
             "--lengths", "4096", "--keys", "0", *common,
             "--output", str(work / f"validate-4k-full-{tag}")]  # fmt: skip
    long = [*CLI, "validate", "--study-name", F_STUDY,
            "--storage", f"sqlite:///{work / 'extend-8x.db'}", "--docs", str(F_DOCS_LONG),
            "--lengths", "65536", "--classic", ",".join(classic), "--passkey-form", "single",
            "--keys", str(KEYS), *common, "--output", str(work / f"validate-64k-full-{tag}")]  # fmt: skip
    return [(f"4k {tag}", short), (f"64k {tag}", long)]


def run_f(report: Any, root: Path, held_out: Path | None, train: Path | None,
          deadline: float | None = None, *, work: Path = F_WORK, device: str = "cuda") -> None:
    """Run F: the fine-tunes and their tables in order, stopped at `deadline`; what finished
    lands in OUT as ``run-f.tar.gz`` and its tables are printed."""
    if held_out is None or train is None:
        report.check("run F", False, "not started: it trains on the kit's text (pack.py --train) "
                     "and validates on its books (--held-out), and one was not carried")  # fmt: skip
        return
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "extend-8x.db").exists():  # a copy: the tree's store stays as committed
        shutil.copy(root / F_STORE, work / "extend-8x.db")
    log = report.out / "run-f.log"
    report.line("\nrun F: the 8x full fine-tunes (searched, YaRN-cd, PI) alike, each judged at "
                "64k and 4k")  # fmt: skip
    for name, cmd in run_f_commands(work, held_out, train, device):
        if not _run(report, f"run F {name}", cmd, log, root, deadline):
            break
    files = [work / "extend-8x.db", work / "measurements.db", *sorted(work.glob("validate-*.*"))]
    for name in F_RUNS:  # each run's record and losses (config.json), grad norms; no weights
        files += sorted((work / name).glob("*.json"))
        states = sorted((work / f"{name}-checkpoints").glob("checkpoint-*/trainer_state.json"),
                        key=lambda p: int(p.parent.name.split("-")[1]))  # fmt: skip
        files += states[-1:]
    _pack(report.out / "run-f.tar.gz", files, work)
    for table in sorted(work.glob("validate-*-full-*.txt")):
        report.line(table.read_text())
