"""Files that are replaced whole or not at all: written to a temporary file in
the same folder, flushed to disk, then renamed over the target. A crash or a
full disk leaves the previous version (run logs, traces, checkpoints)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomically(path: Path, write: Callable[[IO[Any]], object], binary: bool = False) -> None:
    """Call `write(file)` on a temporary file, then rename it to `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename durable; some filesystems refuse to open a folder, where there is nothing to do."""
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


def fsync_tree(folder: Path) -> None:
    """fsync every file and folder under `folder` (before it is renamed into place: a rename that
    reaches the disk before the files it names would leave a complete-looking folder of empty files)."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))
