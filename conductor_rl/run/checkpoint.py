"""Training checkpoints: written whole or not at all, the last K kept.

A checkpoint is a folder `ckpt-<iteration>` holding what the learner wrote
(`model/`: a Hugging Face folder vLLM and transformers load as is; `optimizer/`:
DeepSpeed's optimizer and scheduler state) and `state.json` (iteration, data
cursor, weights version, ledger totals, configuration). It is built under a
`.partial` name and renamed into place only once complete, so a crash, a full
disk or a kill mid-write leaves the previous checkpoint as the latest one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conductor_rl.atomic_files import fsync_dir, fsync_tree, write_atomically

PREFIX = "ckpt-"
STATE_FILE = "state.json"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says what to do."""


def checkpoint_name(iteration: int) -> str:
    return f"{PREFIX}{iteration:06d}"


class Checkpoints:
    def __init__(self, folder: str | Path, keep: int = 3) -> None:
        self.folder = Path(folder)
        self.keep = keep

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first (a folder counts once its state file is in place)."""
        if not self.folder.is_dir():
            return []
        found = {
            p.name: p
            for p in self.folder.iterdir()
            if p.is_dir()
            and p.name.startswith(PREFIX)
            and not p.name.endswith(".partial")
            and (p / STATE_FILE).is_file()
        }
        # "<name>.old" is a complete checkpoint only while its replacement is being renamed in.
        kept = [p for name, p in found.items() if not (name.endswith(".old") and name[:-4] in found)]
        return sorted(kept, key=lambda p: p.name)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def save(self, iteration: int, state: dict[str, Any], write_files: Callable[[Path], None]) -> Path:
        """Write checkpoint `iteration`: `write_files(folder)` fills the folder
        (the learner's weights and optimizer), then the state file goes in and
        the folder is renamed into place. Old checkpoints beyond `keep` go."""
        final = self.folder / checkpoint_name(iteration)
        partial = final.with_name(final.name + ".partial")
        try:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            write_files(partial)
            fsync_tree(partial)  # the weights and optimizer on disk before the state file says they are whole
            write_atomically(partial / STATE_FILE, lambda out: json.dump(state, out, indent=2))
            stale = final.with_name(final.name + ".old")
            if final.exists():  # the same iteration saved again (a stop right after a periodic save)
                shutil.rmtree(stale, ignore_errors=True)
                os.replace(final, stale)  # still a complete checkpoint until the new one is in place
            os.replace(partial, final)
            fsync_dir(self.folder)
            shutil.rmtree(stale, ignore_errors=True)
        except OSError as err:
            shutil.rmtree(partial, ignore_errors=True)
            previous = self.latest()
            raise CheckpointError(
                f"could not write checkpoint {final}: {err.strerror or err}. "
                f"The previous checkpoint is intact ({previous or 'none yet'}); free disk space or make "
                f"{self.folder} writable, then resume with --resume"
            ) from err
        for old in self.complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_state(self, path: Path | None = None) -> dict[str, Any]:
        path = path or self.latest()
        if path is None:
            raise CheckpointError(
                f"no complete checkpoint in {self.folder}: start without --resume, "
                f"or point train.output_dir at the run to resume"
            )
        try:
            return json.loads((path / STATE_FILE).read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(
                f"checkpoint {path} is unreadable ({err}); remove it to resume from the one before"
            ) from err


def check_writable(folder: str | Path) -> Path:
    """Fail early, before any actor starts, if the output folder cannot be written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise CheckpointError(
            f"output folder {folder} is not writable ({err.strerror or err}): "
            f"set train.output_dir to a folder you can write"
        ) from err
    return folder
