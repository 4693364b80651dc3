"""A long forward that outlives its process: `resumable_forward`.

At 128k a Gemma 3 270M forward takes 15-45 minutes on a 2-core CPU, and a process stopped
mid-forward (a sitting's end, a crash, a kill) loses all of it: every stored result is a
whole document's. Inside `resumable_forward`, a decoder layer that finishes `every` seconds
or more after the last save writes its output to `directory` (so does the last layer of a
forward that took that long: a stop in the LM head then keeps the decoder's work), under a
key of everything the layers' outputs depend on. The same forward started again runs its
first layer, finds the key, passes its input through the layers already done and continues
from the saved output: the result is the uninterrupted forward's, bit for bit.

The key is made when the first layer is called, from what reaches the layers: the weights and
buffers (their digest is kept on the model until one of them changes), the embedded input and
the first layer's other tensor arguments, the cos/sin every rotary module handed out (so the
scaling, n̂ and t are in it, whatever patched them), the attention kernel, dtype and device,
and whether the layers are compiled (`fuse_elementwise` rounds otherwise than eager layers; a
compiled layer passed through gets its compiled forward back afterwards). A forward whose
rotary tables are made after its first layer is called is run as usual with nothing kept: no
key could vouch for a saved output.

Some forwards leave more than their output: a shared prefix's capture keeps every layer's keys
and values for the continuations that follow it (`SharedPrefix`, a 128k passkey haystack). Such
a forward passes that keeper as `layer_state`: each save also writes the tensors of the layers
finished since the last one (``<key>.<layer>.kv``, written once each), and a resumed forward
hands those of the layers it passes through back to it, so the continuations see what an
uninterrupted capture left. At 128k in Gemma 3 270M that is 128 MiB a layer.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import Protocol

import torch
from torch import nn

from longrope_opt.patching._compat import find_rotary_modules
from longrope_opt.patching._compile import is_fused


logger = logging.getLogger(__name__)

#: Seconds between saves: a stop loses at most this much of a forward, and a save of a 128k
#: output (under a second) costs under 1 % of it.
EVERY = 120.0

#: Saved outputs kept in a directory, newest first: a stopped process leaves one per forward
#: it was running, and a forward never run again should not hold disk for ever.
KEEP = 4

#: Tensors hashed whole into the key up to this many elements; larger ones by shape and a
#: strided sample (half of a 128k-token hidden state still names every token it embeds).
_WHOLE = 1 << 26

_WEIGHTS = "_longrope_opt_weights_digest"
_OWN = object()  # a layer with no forward of its own instance: its class's

#: The first layer's arguments already in the key: its input, and cos/sin (the rotary hooks'
#: digests; hashing them again is 268 MB more a forward at 128k).
_KEYED = ("hidden_states", "position_embeddings")


class LayerState(Protocol):
    """What a forward's layers leave beside their outputs, saved and restored with them."""

    #: Part of the key, so that forwards leaving different things never share a saved output.
    resume_tag: str

    #: Whether the forward about to run is one to keep. False for the forwards that only read
    #: what was kept (a prefix's continuations), which run unwatched inside the same block.
    keeping: bool

    def layer_tensors(self, layer: int) -> dict[str, torch.Tensor]:
        """The tensors decoder layer `layer` left (after it ran)."""
        ...

    def load_layer_tensors(self, layer: int, tensors: dict[str, torch.Tensor]) -> None:
        """Put back what layer `layer` left (it is passed through and leaves nothing)."""
        ...


@contextlib.contextmanager
def resumable_forward(
    model: nn.Module, directory: str | Path | None, *, every: float | None = None,
    layer_state: LayerState | None = None,
) -> Iterator[None]:  # fmt: skip
    """Keep the decoder's progress on disk during the forwards run inside the block.

    Args:
        model: A loaded transformers causal LM (its decoder's ``layers`` are watched).
        directory: Where outputs are saved (created on the first save); None keeps nothing.
            A block that ends without an exception deletes what it saved (so does a generator
            running it that its caller closes); one that raises leaves it for the rerun.
        every: Seconds between saves (default `EVERY`; 0: after every layer, as tests use).
        layer_state: What the layers leave beside their outputs (a shared prefix's keys and
            values), saved with them and put back on a resume. Its forwards that only read
            them (``keeping`` False) run unwatched, so a block can hold a capture and its
            continuations: a stop among the continuations then finds the whole capture saved.

    Yields:
        Nothing; forwards of `model` inside the block save and resume.
    """
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if get_decoder is not None else model
    layers = list(getattr(decoder, "layers", None) or [])
    if directory is None or not layers:
        yield
        return
    every = EVERY if every is None else float(every)
    watch = _Watch(model, layers, Path(directory), every, layer_state)
    handles = [m.register_forward_hook(watch.on_rotary) for m in find_rotary_modules(model)]
    handles.append(layers[0].register_forward_pre_hook(watch.on_first, with_kwargs=True))
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_hook(watch.layer_hook(i)))
    try:
        yield
    except GeneratorExit:  # a generator running the block was closed: its caller is done
        watch.forget()
        raise
    else:
        watch.forget()  # every forward of the block finished: nothing to resume
    finally:
        watch.unshadow()
        for handle in handles:
            handle.remove()


class _Watch:
    """The hooks' state: one forward at a time, as a decoder runs its layers in order."""

    def __init__(self, model: nn.Module, layers: list[nn.Module], directory: Path,
                 every: float, state: LayerState | None) -> None:  # fmt: skip
        self.model, self.layers, self.directory, self.every = model, layers, directory, every
        self.state = state
        self.kept = 0  # layers whose `state` tensors are on disk for this key
        self.rotary: list[str] = []  # digests of the cos/sin handed out for the next forward
        self.key: str | None = None
        self.resume: tuple[int, torch.Tensor] | None = None
        # layers passed through, with the forward their instance held before (a compiled one)
        self.shadowed: list[tuple[nn.Module, Any]] = []
        self.saved: set[Path] = set()
        self.start = self.last = 0.0

    def on_rotary(self, _module: nn.Module, _args: Any, output: Any) -> None:
        self.rotary.append(_digest(output))

    def on_first(self, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        # sorted: a decoder may call its rotary module once per layer type in the order of a
        # set of strings (Gemma 3: `set(config.layer_types)`), which changes between processes
        rotary, self.rotary = sorted(self.rotary), []
        self.key, self.resume = None, None
        if not rotary or not isinstance(hidden, torch.Tensor):
            return  # cos/sin made inside the layers: nothing can vouch for a saved output
        if self.state is not None and not self.state.keeping:
            return  # a continuation: its output depends on kept tensors the key does not name
        config = getattr(self.model, "config", None)
        parts = [_weights_digest(self.model), str(getattr(config, "_attn_implementation", None)),
                 str(hidden.dtype), hidden.device.type, _digest(hidden), *rotary,
                 *(_digest(a) for a in args[1:]),
                 *(f"{k}={_digest(v)}" for k, v in sorted(kwargs.items()) if k not in _KEYED)]  # fmt: skip
        if is_fused(self.model):  # compiled layers round otherwise than eager ones
            parts.append("fused")
        if self.state is not None:  # only then: plain forwards' keys stay as they were
            parts.append(f"state={self.state.resume_tag}")
        self.key = hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]
        self.start = self.last = time.monotonic()
        self.kept = 0
        saved = _load(self._path(), self.key, hidden.shape)
        if saved is None:
            return
        done, output = saved
        if self.state is not None:
            left = [_read(self._state_path(j)) for j in range(1, done + 1)]
            if any(t is None for t in left):
                return  # a layer's tensors are gone: run the whole forward again
            for j, tensors in enumerate(left, start=1):
                self.state.load_layer_tensors(j, tensors)  # type: ignore[arg-type]
            self.kept = done + 1
        logger.info("resuming a forward after its layer %d of %d (%s)", done + 1,
                    len(self.layers), self._path())  # fmt: skip
        self.resume = (done, output)
        self.saved.add(self._path())  # this forward's now: deleted once the block finishes
        for layer in self.layers[1 : done + 1]:  # the first layer runs: its call made the key
            self.shadowed.append((layer, layer.__dict__.get("forward", _OWN)))
            layer.forward = _passthrough

    def layer_hook(self, i: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> Any:
            if self.key is None:
                return None
            if self.resume is not None:
                done, saved = self.resume
                if i < done:
                    return None  # passed through: its output is its input
                self.resume = None
                self.unshadow()
                hidden = saved.to(_first(output).device, _first(output).dtype)
                return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
            now = time.monotonic()
            last = i == len(self.layers) - 1
            if now - self.last >= self.every or (last and now - self.start >= self.every):
                self._save(i, _first(output))
                self.last = now
            return None

        return hook

    def unshadow(self) -> None:
        for layer, before in self.shadowed:
            if before is _OWN:
                layer.__dict__.pop("forward", None)
            else:  # `fuse_elementwise`'s compiled forward, put back as it was
                layer.forward = before
        self.shadowed = []

    def forget(self) -> None:
        for path in self.saved:
            _unlink(path)
        self.saved.clear()

    def _path(self) -> Path:
        return self.directory / f"{self.key}.pt"

    def _state_path(self, layer: int) -> Path:
        return self.directory / f"{self.key}.{layer}.kv"

    def _save(self, layer: int, hidden: torch.Tensor) -> None:
        path = self._path()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.state is not None:  # the layers' tensors first: a saved output implies them
            for j in range(self.kept, layer + 1):
                tensors = {k: v.detach().cpu() for k, v in self.state.layer_tensors(j).items()}
                _write(tensors, self._state_path(j))
            self.kept = layer + 1
        _write({"key": self.key, "layer": layer, "hidden": hidden.detach().cpu()}, path)
        self.saved.add(path)
        _prune(path.parent, keep=path)


def _write(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a reader sees the previous save or this one, never half of one


def _unlink(path: Path) -> None:
    # a saved output and the layer tensors saved with it (`<key>.pt`, `<key>.<layer>.kv`)
    path.unlink(missing_ok=True)
    for extra in path.parent.glob(f"{path.stem}.*.kv"):
        extra.unlink(missing_ok=True)


def _passthrough(hidden_states: torch.Tensor, *_args: Any, **_kwargs: Any) -> torch.Tensor:
    # a layer already done: the saved output replaces the last such layer's (its forward hook)
    return hidden_states


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _read(path: Path) -> dict[str, Any] | None:
    """A saved file's dict (an output, or one layer's tensors); None when it cannot be read."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, TypeError, ValueError) as exc:
        logger.warning("ignoring an unreadable saved forward file %s (%s)", path, exc)
        return None
    return saved if isinstance(saved, dict) else None


def _load(path: Path, key: str, shape: torch.Size) -> tuple[int, torch.Tensor] | None:
    saved = _read(path) if path.is_file() else None
    if saved is None or saved.get("key") != key:
        return None
    try:
        done, hidden = int(saved["layer"]), saved["hidden"]
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning("ignoring an unreadable saved forward file %s (%s)", path, exc)
        return None
    return (done, hidden) if tuple(hidden.shape) == tuple(shape) else None


def _prune(directory: Path, *, keep: Path) -> None:
    found = []
    for path in directory.glob("*.pt"):
        with contextlib.suppress(OSError):  # another process pruned it first
            found.append((path.stat().st_mtime, path))
    found.sort(reverse=True)
    for _, path in found[KEEP:]:
        if path != keep:
            _unlink(path)


def _digest(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)
        if flat.numel() > _WHOLE:
            flat = flat[:: flat.numel() // _WHOLE + 1]
        h = hashlib.sha256(f"{tuple(value.shape)}{value.dtype}".encode())
        h.update(flat.contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:24]
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_digest(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_digest(v)}" for k, v in sorted(value.items())) + "}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return type(value).__name__  # a cache object, a mask builder: follows from the rest


def _weights_digest(model: nn.Module) -> str:
    # The weights' digest is made again only when one of them changed (a tensor's version
    # counter moves with every in-place write): hashing 1 GB costs about a second. Buffers are
    # small and may be remade under inference mode (no version counter): hashed every time.
    params = list(model.parameters())
    signature = tuple((p.data_ptr(), p._version, tuple(p.shape), str(p.dtype)) for p in params)
    cached = model.__dict__.get(_WEIGHTS)
    if cached is None or cached[0] != signature:
        cached = (signature, _hash(params))
        model.__dict__[_WEIGHTS] = cached
    return f"{cached[1]}+{_hash(list(model.buffers()))}"


def _hash(tensors: Sequence[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]
