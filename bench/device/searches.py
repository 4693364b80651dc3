"""Run B and run C of the device run: searches at GPU speed, each returned whole as it finishes.

Run B extends SmolLM2-135M to 32k, 64k and 128k (4×, 8×, 16×), in that order, so a run cut off
by the device's time limit still returns every ratio it finished: per ratio, `extend` (sized to
its budget by the forward it times there; validated on the held-out text the kit carried), then
`validate` of its winner against every classic row (none, PI, NTK, YaRN, YaRN-cd, NTK-cd) on 5
held-out documents and 20 passkeys (what `extend` measured comes from the store), and the study,
its store, tables and report packed into ``extend-<r>x.tar.gz`` in OUT at once.

Run C, for the second time a GPU is lent: the paper's whole pipeline at 4×. `finetune` at 32k
with the 4× search's factors (run B's study, or the committed 4× factor file when run B has not
run on this machine) and, with the same steps and documents, with YaRN-cd; then each fine-tuned
model as it is at 32k (perplexity on 5 held-out documents, 20 passkeys) and at 64k, where
`validate` extends it 2× further against every classic row on top of it.

Run G, Gemma 3 270M at 8× (32k → 256k, the ratio the CPU cannot reach): `search` on the built-in
corpus's code (the two stdlib packages that hold a 256k-token window in Gemma's tokens: no book is
read, so all three books that hold one are left for the validation), stopped by its own timeout,
then `validate` of its best trial against every classic row on those three books and 20 passkeys,
packed as ``gemma3-8x.tar.gz``. `search`, not `extend`: `extend`'s plan wants held-out documents
the search might also read, and only three books hold 256k Gemma tokens.

Every command is the real CLI's (`tests/bench_tests/test_device_check.py` parses each with the
`longrope-opt` parser); the times are the GPU estimates of `bench/device/README.md`.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


#: Run B's lengths and the budget of each `extend` (4× first).
B_LENGTHS = (32768, 65536, 131072)
B_BUDGETS = ("90s", "2m", "3m")
#: Every classic row, for the tables the issue asks for.
CLASSIC = "none,pi,ntk,yarn,yarn-cd,ntk-cd"
#: Held-out documents and passkeys of each table.
DOCS, KEYS = 5, 20
#: From this ratio on the built-in corpus has too few documents of the length for a search (one of
#: 64k tokens, none of 128k: the H100 run's 8x and 16x exited 2 at once): the search also reads
#: the carried books, and the validation the books it did not read (8 carried: 6 hold 64k, 5 128k).
BOOKS_FROM = 8
#: Held-out documents the validation gets at a ratio where the search reads books too.
DOCS_AFTER_BOOKS = {8: 3, 16: 2}
#: Run C: fine-tuning steps and documents (the same for both models), and its lengths.
C_STEPS, C_SAMPLES, C_LENGTHS = 40, 16, (32768, 65536)
#: The 4× factors committed from the CPU search, for run C without run B's study.
FACTORS_4X = "experiments/results/shipped-4x.json"
#: Run G: Gemma 3 270M (trained at 32k) to 8×, its search's documents (the built-in corpus's
#: code: idlelib and test hold 256k Gemma tokens) and its validation's (the books that hold one).
G_MODEL, G_LENGTH, G_SAMPLES, G_DOCS = "gemma3-270m", 262144, 2, 3
#: Seconds run G's search may take (its `--timeout`; the trial running then finishes).
G_SEARCH_S = 180
WORK = Path("/tmp/longrope-run-b")
#: Seconds a command stopped at the deadline gets to finish its running trial after the first
#: interrupt (extend's Ctrl-C), and then to fail it after the second (Ctrl-C again: Optuna marks
#: it failed), before it is killed: either way the stored study resumes cleanly.
GRACE_S = (15.0, 5.0)
CLI = [sys.executable, "-m", "longrope_opt.cli"]


@dataclass(frozen=True)
class Target:
    """What run B extends and where: SmolLM2 on the card, or a tiny model on the CPU (the
    rehearsal in tests/bench_tests, which runs the same commands end to end)."""

    model: str = "smollm2-135m"
    device: str = "cuda"
    trained: int = 8192  # the model's trained length: ratios are named against it
    extra: tuple[str, ...] = ()  # more `extend` flags (the rehearsal's --dtype float32)


DEVICE = Target()
GEMMA = Target(G_MODEL, trained=32768)


def ratio(length: int, trained: int = DEVICE.trained) -> str:
    """``"4x"`` for 32768 over SmolLM2's 8192."""
    return f"{length // trained}x"


def run_b_commands(length: int, budget: str, work: Path, held_out: Path | None,
                   target: Target = DEVICE) -> list[list[str]]:  # fmt: skip
    """`extend` to `length` and the all-rows `validate` of its winner, in its own storage."""
    r = ratio(length, target.trained)
    storage = f"sqlite:///{work / f'extend-{r}.db'}"
    out = work / f"out-{r}"
    held = ["--held-out", str(held_out)] if held_out is not None else []
    times = length // target.trained
    books = held_out is not None and times >= BOOKS_FROM
    search = ["--corpus", f"builtin,{held_out}"] if books else []
    extend = [*CLI, "extend", target.model, "--to", str(length), "--budget", budget,
              "--storage", storage, "--study-name", f"extend-{r}", "--out", str(out),
              "--device", target.device, "--no-fuse", *target.extra, *held, *search]  # fmt: skip
    corpus = ["--corpus", str(held_out)] if held_out is not None else []
    docs = DOCS_AFTER_BOOKS.get(times, 2) if books else DOCS
    validate = [*CLI, "validate", "--study-name", f"extend-{r}", "--storage", storage,
                "--docs", str(docs), "--keys", str(KEYS), "--lengths", str(length),
                "--classic", CLASSIC, "--device", target.device, "--output",
                str(out / "all-rows"), *corpus]  # fmt: skip
    return [extend, validate]


def run_g_commands(work: Path, held_out: Path, search_s: int = G_SEARCH_S,
                   target: Target | None = None) -> list[list[str]]:  # fmt: skip
    """Run G: `search` Gemma 3 at 8× for `search_s` seconds on the built-in code, then `validate`
    its best trial against every classic row on `held_out`'s books, in its own storage."""
    target = target or GEMMA
    r = ratio(G_LENGTH, target.trained)
    name = f"gemma3-{r}"
    storage = f"sqlite:///{work / f'{name}.db'}"
    search = [*CLI, "search", "--model", target.model, "--target-length", str(G_LENGTH),
              "--corpus", "builtin", "--samples", str(G_SAMPLES), "--n-trials", "1000",
              "--timeout", str(search_s), "--storage", storage, "--study-name", name,
              "--device", target.device, "--no-fuse", *target.extra]  # fmt: skip
    validate = [*CLI, "validate", "--study-name", name, "--storage", storage,
                "--corpus", str(held_out), "--docs", str(G_DOCS), "--keys", str(KEYS),
                "--lengths", str(G_LENGTH), "--classic", CLASSIC, "--device", target.device,
                "--output", str(work / f"out-{name}" / "all-rows")]  # fmt: skip
    return [search, validate]


def run_c_commands(work: Path, held_out: Path | None) -> list[list[str]]:
    """`finetune` with the 4× search's factors and with YaRN-cd (same steps, same documents),
    then each fine-tuned model as it is at 32k (perplexity and passkeys: `eval`) and extended
    2× to 64k against every classic row on top of it (`validate`)."""
    storage = f"sqlite:///{work / 'extend-4x.db'}"
    searched = (["--study-name", "extend-4x", "--storage", storage]
                if (work / "extend-4x.db").is_file() else ["--factors", FACTORS_4X])  # fmt: skip
    # the built-in text, as before the stage's default became Debian's perl-doc (not on the
    # lent machine)
    common = ["--target-length", "32768", "--steps", str(C_STEPS), "--samples", str(C_SAMPLES),
              "--corpus", "builtin", "--device", "cuda", "--overwrite"]  # fmt: skip
    commands = [
        [*CLI, "finetune", *searched, *common, "--output", str(work / "ft-searched")],
        [*CLI, "finetune", "--method", "yarn-cd", *common, "--output", str(work / "ft-yarn-cd")],
    ]  # fmt: skip
    corpus = ["--corpus", str(held_out)] if held_out is not None else []
    short, long = C_LENGTHS
    for name in ("ft-searched", "ft-yarn-cd"):
        model = ["--model", str(work / name), "--device", "cuda", *corpus]
        commands += [
            [*CLI, "eval", *model, "--methods", "none", "--lengths", str(short), "--samples",
             str(DOCS), "--output", str(work / f"{name}-ppl-{ratio(short)}")],
            [*CLI, "eval", *model, "--task", "passkey", "--trials", str(KEYS), "--methods",
             "none", "--lengths", str(short), "--output", str(work / f"{name}-keys-{ratio(short)}")],
            [*CLI, "validate", *model, "--docs", str(DOCS), "--keys", str(KEYS), "--lengths",
             str(long), "--classic", CLASSIC, "--storage", f"sqlite:///{work / 'run-c.db'}",
             "--output", str(work / f"{name}-validate-{ratio(long)}")],
        ]  # fmt: skip
    # the two fine-tuned models side by side on the same documents and prompts, paired
    commands.append([*CLI, "validate", "--models", str(work / "ft-searched"), "--models",
                     str(work / "ft-yarn-cd"), "--device", "cuda", *corpus, "--docs", str(DOCS),
                     "--keys", str(KEYS), "--lengths", str(short), "--classic", "none",
                     "--storage", f"sqlite:///{work / 'run-c.db'}",
                     "--output", str(work / f"ft-paired-{ratio(short)}")])  # fmt: skip
    return commands


def write_yarn_cd(path: Path, length: int = 32768) -> Path:
    """YaRN-cd for SmolLM2 at `length` as a factor file (what run C fine-tunes the reference
    with): the same row `validate` measures."""
    import json

    from longrope_opt import RopeSpec
    from longrope_opt.evaluation import classic_rows
    from longrope_opt.models import read_config

    spec = RopeSpec.from_config(read_config("smollm2-135m"))
    row = next(r for r in classic_rows(spec, length) if r.name == "yarn-cd")
    assert row.scaling is not None
    path.write_text(json.dumps({**row.scaling.to_dict(), "target_length": length}) + "\n")
    return path


def _run(report: Any, name: str, cmd: list[str], log: Path, root: Path,
         deadline: float | None = None) -> bool:  # fmt: skip
    """Run one CLI command into `log`; stopped by an interrupt at `deadline` (a
    ``time.monotonic()`` value) so that what it stored so far is whole and comes back."""
    report.line(f"  {name}: {' '.join(cmd[2:])}")
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        report.check(name, False, "not started: the call's time is spent (--stop-after)")
        return False
    with log.open("a") as fh:
        with _sigint_inherited_as_default():
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=root)
        try:
            code = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            code = _interrupt(proc)
            report.check(name, False, f"stopped at --stop-after (exit {code}); what it stored "
                         f"is packed, and the same command resumes it; log in {log.name}")  # fmt: skip
            return False
    report.check(name, code == 0, f"exit {code}; log in {log.name}")
    return code == 0


@contextlib.contextmanager
def _sigint_inherited_as_default() -> Iterator[None]:
    # A check started from a background job of a non-interactive shell has SIGINT ignored, and
    # its commands inherit that: the Ctrl-C that stops a search cleanly would go unheard until
    # the kill (its running trial left RUNNING). exec resets a caught signal, not an ignored
    # one, so only then is it the default for the instant of the start (not in a preexec_fn:
    # unsafe in a process with threads, and torch's are running here).
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupt(proc: subprocess.Popen) -> int:
    """Ctrl-C, Ctrl-C again, then kill, each after its grace period; the exit code."""
    for grace in GRACE_S:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    return proc.wait()


def _pack(tar_path: Path, files: list[Path], work: Path = WORK) -> None:
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in files:
            if path.is_file() and path.stat().st_size < 8 * 2**20:
                tar.add(path, arcname=str(path.relative_to(work)))


def run_b(report: Any, root: Path, budgets: list[str], lengths: list[int],
          held_out: Path | None, deadline: float | None = None, *, target: Target = DEVICE,
          work: Path = WORK) -> None:  # fmt: skip
    """Run B, ratio by ratio; each ratio's results land in OUT as soon as it finishes (or is
    stopped at `deadline`: its study so far, which the same command resumes)."""
    work.mkdir(parents=True, exist_ok=True)
    names = ", ".join(ratio(n, target.trained) for n in lengths)
    report.line(f"\nrun B: {names} at budgets {', '.join(budgets)}")
    for length, budget in zip(lengths, budgets):
        r = ratio(length, target.trained)
        commands = run_b_commands(length, budget, work, held_out, target)
        checks = (f"run B extend {r}", f"run B validate {r} (every classic row)")
        _search_then_validate(report, checks, f"extend-{r}", f"out-{r}", commands, root,
                              deadline, work)  # fmt: skip


def _search_then_validate(report: Any, checks: tuple[str, str], name: str, out_name: str,
                          commands: list[list[str]], root: Path, deadline: float | None,
                          work: Path) -> None:  # fmt: skip
    """The search, then (if it ended well) the all-rows validation, under the check names
    `checks`, logged to OUT/NAME.log; the study ``NAME.db`` and what ``OUT_NAME/`` holds packed
    into OUT/NAME.tar.gz, the table printed."""
    search, validate = commands
    log = report.out / f"{name}.log"
    if _run(report, checks[0], search, log, root, deadline):
        _run(report, checks[1], validate, log, root, deadline)
    out = work / out_name
    # the study always (a search stopped before it wrote anything still comes back whole)
    files = [work / f"{name}.db", *(sorted(out.glob("*.*")) if out.is_dir() else [])]
    _pack(report.out / f"{name}.tar.gz", files, work)
    table = out / "all-rows.txt"
    if table.is_file():
        report.line(table.read_text())


def run_g(report: Any, root: Path, held_out: Path | None, deadline: float | None = None,
          search_s: int = G_SEARCH_S, *, work: Path = WORK) -> None:  # fmt: skip
    """Run G: the Gemma 3 search and its all-rows validation; the study, its store and the
    table land in OUT as ``gemma3-8x.tar.gz`` (a search stopped at `deadline` comes back too)."""
    if held_out is None:
        report.check("run G", False, "not started: it validates on the kit's books "
                     "(pack.py --gemma --held-out DIR), and none were carried")  # fmt: skip
        return
    work.mkdir(parents=True, exist_ok=True)
    commands = run_g_commands(work, held_out, search_s)
    name = commands[0][commands[0].index("--study-name") + 1]
    report.line(f"\nrun G: Gemma 3 270M to {G_LENGTH} tokens (8x), searched for {search_s} s")
    checks = (f"run G search {name}", f"run G validate {name} (every classic row)")
    _search_then_validate(report, checks, name, f"out-{name}", commands, root, deadline, work)


def run_c(report: Any, root: Path, held_out: Path | None, deadline: float | None = None) -> None:
    """Run C: both fine-tunes, then both validations; the tables land in OUT."""
    WORK.mkdir(exist_ok=True)
    write_yarn_cd(WORK / "yarn-cd-4x.json")
    log = report.out / "run-c.log"
    report.line("\nrun C: fine-tune 4x with the searched factors and with YaRN-cd, then validate")
    for i, cmd in enumerate(run_c_commands(WORK, held_out)):
        if not _run(report, f"run C step {i + 1}", cmd, log, root, deadline):
            break
    files = [p for name in ("ft-searched", "ft-yarn-cd") for p in sorted(WORK.glob(f"{name}-*.*"))]
    _pack(report.out / "run-c.tar.gz", [WORK / "run-c.db", WORK / "yarn-cd-4x.json", *files], WORK)
    for table in sorted(WORK.glob("ft-*-validate-*.txt")):
        report.line(table.read_text())
