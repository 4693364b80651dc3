"""Result files that survive an interruption: written whole or not at all.

A resumable run rewrites its results file after every piece of work. Writing it in place, a kill
(or a full disk) in the middle of the write leaves half a JSON file, and the next run cannot read
any of the hours it held. Writing a sibling file and renaming it over the old one is atomic on
POSIX and Windows, so the file on disk is always the old version or the new one; the file and
then (where the system allows) its folder are fsynced, so a power cut after the call keeps the
new version.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace the file at `path` with `text` (UTF-8) in one step.

    Args:
        path: The file to write; its folder must exist.
        text: The whole new content.

    Raises:
        OSError: The folder is missing or not writable, or the disk is full; the old file is then
            left as it was.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the name points at them
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    # The rename lives in the folder's entry: without this, a power cut right after it can bring
    # back the old file (a killed process cannot: the kernel already holds the rename). Best
    # effort: Windows cannot open a folder, and some file systems refuse to fsync one.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
