"""Flags shared by subcommands and their parsing helpers."""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

from longrope_opt.errors import InvalidArgumentError


def add_subcommand(
    sub: Any, name: str, *, summary: str, description: str, examples: str,
    param_flags: dict[str, str] | None = None,
) -> Any:  # fmt: skip
    """A subcommand parser whose epilog shows `examples` verbatim.

    `param_flags` names the flags of library parameters whose name is not the flag's (e.g.
    ``{"k": "--samples"}``); the others are found from the parser (see `_messages`).
    """
    parser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(parser=parser, param_flags=dict(param_flags or {}))
    return parser


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--model, --corpus, --seed, --dtype."""
    group = parser.add_argument_group("model and text")
    group.add_argument(
        "--model",
        default="smollm2-135m",
        help="'smollm2-135m' (offline default), 'gemma3-270m', a model directory, a .gguf file, "
        "or a hub id",
    )
    group.add_argument(
        "--corpus",
        default="builtin",
        help="'builtin' (CPython's own long text, offline: prose and code), a .txt file or folder, "
        "a datasets name, or several of these comma-separated (builtin,./books/): documents are "
        "drawn from each kind of text in turn",
    )
    group.add_argument(
        "--samples", type=int, default=2, metavar="K", help="documents to evaluate (default 2)"
    )
    group.add_argument("--seed", type=int, default=0, help="chooses the documents (default 0)")
    add_dtype_flag(group)
    add_device_flag(group)
    add_fuse_flag(group)


def add_fuse_flag(group: Any) -> None:
    """``--fuse/--no-fuse``: compile the element-wise work of long forwards (default on)."""
    group.add_argument(
        "--fuse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compile element-wise work for faster long forwards (default on)",
    )


def add_dtype_flag(group: Any) -> None:
    """--dtype: a compute path, or auto (the fastest on this machine, measured once)."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from longrope_opt.models import PATHS

    group.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", *PATHS],
        help="compute path (RoPE angles are fp32 regardless): auto (default: the fastest of "
        "bfloat16, bf16-fp32attn and float32 on this CPU, timed once and cached), "
        f"{PATHS.help_text()}",
    )


def add_device_flag(group: Any, default: str = "auto") -> None:
    """--device: auto (CUDA when available), cpu, cuda or cuda:N; --attn."""
    group.add_argument(
        "--attn",
        default=None,
        choices=["sdpa", "flash_attention_2", "eager"],
        help="attention kernel (default: flash_attention_2 on CUDA when flash-attn is installed "
        "and the model supports it, else SDPA; the compute path may use fp32 SDPA on CPU)",
    )
    group.add_argument(
        "--device",
        default=default,
        metavar="DEVICE",
        help=f"auto (CUDA when available, else CPU), cpu, cuda or cuda:N (default {default}); "
        "several GPUs: one worker each, with CUDA_VISIBLE_DEVICES",
    )


def add_storage_flag(parser: Any) -> None:
    """--storage, resolved as flag > $LONGROPE_OPT_STORAGE > sqlite:///longrope.db."""
    parser.add_argument(
        "--storage",
        default=None,
        help="storage URL: sqlite:///file.db, postgresql://..., grpc://host:port (a "
        "`storage-server`), journal:///file.log (default: $LONGROPE_OPT_STORAGE or "
        "sqlite:///longrope.db)",
    )


def add_evolution_flags(group: Any, *, p: int, n1: int, n2: int, k: int) -> None:
    """--population-size, --num-mutations, --num-crossovers, --num-parents, --mutation-prob."""
    group.add_argument("--population-size", type=int, default=p, help=f"P, generation 0 ({p})")
    group.add_argument("--num-mutations", type=int, default=n1, help=f"N1 per generation ({n1})")
    group.add_argument("--num-crossovers", type=int, default=n2, help=f"N2 per generation ({n2})")
    group.add_argument("--num-parents", type=int, default=k, help=f"top-k kept ({k})")
    group.add_argument("--mutation-prob", type=float, default=0.3, help="p (0.3)")
    group.add_argument(
        "--operators",
        choices=("surrogate", "paper", "adaptive"),
        default="surrogate",
        help="surrogate (default): adaptive children screened by a quadratic model of the trials, "
        "every other one a trust-region step of the model's minimum; paper: Algorithm 1 (each λ "
        "re-drawn between its neighbours); adaptive: log-normal steps sized by the parents' "
        "spread, sorted, plus a blend crossover",
    )


def add_space_flags(group: Any, space_help: str) -> None:
    """--space (full / critical) and --critical-above."""
    group.add_argument("--space", choices=("full", "critical"), default="full", help=space_help)
    group.add_argument(
        "--critical-above",
        type=int,
        default=None,
        help="critical space: how far c may rise above theory (default 6, as far as below); 0 "
        "keeps every λ at or above YaRN-cd's, which the 4x passkey results favour",
    )


def text_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `SearchConfig` fields every search command shares: model, text and target length."""
    return {
        "model": args.model,
        "corpus": args.corpus,
        "samples": args.samples,
        "seed": args.seed,
        "target_length": args.target_length,
    }


def evolution_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `LongRoPESampler` keyword arguments those flags hold."""
    kwargs: dict[str, Any] = {
        "population_size": args.population_size,
        "num_mutations": args.num_mutations,
        "num_crossovers": args.num_crossovers,
        "num_parents": args.num_parents,
        "mutation_prob": args.mutation_prob,
    }
    # always stored: a study made before the surrogate operators (no entry) ran the paper's
    kwargs["operators"] = args.operators
    return kwargs


def add_heartbeat_flag(parser: Any) -> None:
    """--heartbeat-interval: seconds between a running trial's heartbeats (0 turns it off)."""
    parser.add_argument(
        "--heartbeat-interval",
        type=int,
        default=60,
        metavar="SECONDS",
        help="trial heartbeat; a trial silent for 2x this is failed and its candidate retried "
        "(default 60, 0 = off)",
    )


def check_output_file(path: str, *, flag: str) -> None:
    """An output file's folder must exist and the file must not be a directory: checked before
    any model loads, so a typo never costs an evaluation."""
    # on use: `--help` and bad input stay light (torch loads in seconds)
    from pathlib import Path

    target = Path(path).expanduser()
    if target.is_dir():
        raise InvalidArgumentError(f"`{flag}` {path!r} is a directory; give a file name.")
    parent = target.parent
    if not parent.is_dir():
        raise InvalidArgumentError(
            f"`{flag}` {path!r}: folder {str(parent)!r} does not exist; create it first."
        )


def add_overwrite_flag(parser: Any) -> None:
    """--overwrite: allow writing into an existing non-empty model directory."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an existing non-empty directory (never the source model's own)",
    )


def int_list(text: str, *, name: str) -> list[int]:
    """'8192,16k,32k' → [8192, 16384, 32768]."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        try:
            values.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
        except ValueError:
            raise InvalidArgumentError(
                f"`--{name}` must be a comma-separated list of integers (e.g. 8192,16k), got {text!r}."
            ) from None
    if any(v < 2 for v in values):
        raise InvalidArgumentError(f"`--{name}` values must be >= 2, got {text!r}.")
    return values


def add_listen_flags(parser: Any, *, port: int, danger: str) -> None:
    """--host (loopback by default), --allow-remote (what `danger` says anyone could do) and
    --port, for the commands that serve studies over the network."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; any "
                        "other address needs --allow-remote)")  # fmt: skip
    parser.add_argument("--allow-remote", action="store_true",
                        help=f"listen on a non-loopback --host. {danger}")  # fmt: skip
    parser.add_argument("--port", type=int, default=port, help=f"port (default {port})")


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_host(host: str, allow_remote: bool, *, what: str) -> bool:
    """Refuse a `--host` beyond loopback unless `--allow-remote`: `what` (a server with no
    authentication) would serve every study to anyone who reaches the port. Returns whether
    it is remote (the caller warns)."""
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise InvalidArgumentError(
            f"`--host` {host!r} is reachable from other machines, and {what} has no "
            "authentication: add --allow-remote to listen there anyway, or keep the default "
            "127.0.0.1 and reach it through an SSH tunnel."
        )
    return remote


def _margin(text: str) -> float:
    value = text.strip()
    try:
        return float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a fraction like 0.01 or a percentage like 1%, got {text!r}"
        ) from None


def add_margin_flag(group: Any) -> None:
    """``--margin``: the practical margin on the perplexity ratio (None: the library's)."""
    group.add_argument(
        "--margin", type=_margin, default=None, metavar="M",
        help="a ratio within [1 - M, 1 + M] is 'equivalent': no reason to ship searched factors "
        "over the formula; 'dominates' needs the whole interval below 1 - M (e.g. 0.01 or 1%%; "
        "default 1%%: a smaller gain does not carry from one kind of text to another; see "
        "docs/results.md)",
    )  # fmt: skip


def add_passkey_form_flag(group: Any, *, default: str, auto: bool = False) -> None:
    """``--passkey-form``: how passkey prompts are measured (`passkey_results`)."""
    choices = ("auto", "single", "branched") if auto else ("single", "branched")
    group.add_argument(
        "--passkey-form", choices=choices, default=default,
        help="'single': the paper's one-key prompt, about 0.6 of a forward per key on a CPU; "
        "'branched': the haystack once, each key and question grafted onto it, one forward "
        "for all a row's keys (CPU only; agreement with 'single' in docs/results.md)"
        + ("; 'auto': branched on a CPU, single elsewhere" if auto else "")
        + f" (default {default})",
    )  # fmt: skip


def add_trained_length_flag(group: Any) -> None:
    """``--trained-length``: the checkpoint's trained length when its config says otherwise."""
    group.add_argument(
        "--trained-length", type=int, default=None, metavar="N",
        help="the length the checkpoint was trained or fine-tuned to, when its config says "
        "otherwise (default: the config's max_position_embeddings, or the reach of its yarn / "
        "linear RoPE scaling); the extension's ratio counts from it",
    )  # fmt: skip
