"""The resumable record store of an evaluation: records.jsonl and evaluation.json.

Records are appended as JSON lines and flushed to disk (fsync) after every
batch, so a killed evaluation loses at most the batch in flight and resumes
from the rest. The file is read once and the store keeps its records in
memory after that (one process writes a folder at a time), so asking what is
done before every batch costs nothing however long the evaluation.
evaluation.json holds the settings the folder was started with; a later run
on the same folder must bring the same ones, or its records would mix two
experiments.

Decisions:

- A kill mid-write leaves a last line without its newline: it is ignored when
  reading and cut off before the next append. A broken line *before* the last
  one was not made by a kill: it is a `StoreError`, naming the line.
- A key (method, benchmark, question id, repeat) recorded twice keeps its last
  record. `done()` leaves out keys whose record is an infrastructure ``error``,
  so a resumed evaluation tries those samples again (an outage should not
  stay in the table), and the new record replaces the old.
- Settings are compared as JSON (tuples equal lists); nested mappings are
  compared key by key, so the error names ``evaluate.repeats``, not ``evaluate``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from conductor_rl.atomic_files import write_atomically
from conductor_rl.evaluation.summary import EvalRecord

__all__ = ["RECORDS_JSONL", "SETTINGS_FILE", "RecordStore", "ResumeMismatchError", "StoreError"]

RECORDS_JSONL = "records.jsonl"
SETTINGS_FILE = "evaluation.json"

Key = tuple[str, str, str, int]


class StoreError(RuntimeError):
    """The record store cannot be read or written; the message says what to do."""


class ResumeMismatchError(StoreError):
    """The folder holds an evaluation with other settings."""


_MISSING = object()


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(dict.fromkeys([*old, *new]))
        return [d for k in keys for d in _differences(old.get(k, _MISSING), new.get(k, _MISSING), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".")]


class RecordStore:
    """records.jsonl and evaluation.json in `folder`."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / RECORDS_JSONL
        self.settings_path = self.folder / SETTINGS_FILE
        self._latest: dict[Key, EvalRecord] | None = None
        self._end = 0

    # -- settings

    def check_settings(self, settings: Mapping[str, Any]) -> None:
        """Write `settings` to evaluation.json in a new folder; in a used one, raise
        ResumeMismatchError naming the keys whose values differ."""
        new = json.loads(json.dumps(settings, default=str))
        if self.settings_path.exists():
            try:
                old = json.loads(self.settings_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise StoreError(
                    f"{self.settings_path} is unreadable ({err}): delete it (and {RECORDS_JSONL}) "
                    "to start this evaluation afresh"
                ) from err
            differ = _differences(old, new)
            if differ:
                raise ResumeMismatchError(
                    f"{self.folder} holds an evaluation with other settings ({', '.join(differ)} differ): "
                    "use another output folder, or the same settings to resume it"
                )
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(self.settings_path, lambda out: json.dump(new, out, indent=2, sort_keys=True))

    # -- records

    def _load(self) -> dict[Key, EvalRecord]:
        """Read records.jsonl once; later appends keep this copy current (one writer per folder)."""
        if self._latest is not None:
            return self._latest
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        self._end = data.rfind(b"\n") + 1  # where a torn last line starts
        latest: dict[Key, EvalRecord] = {}
        # Split on the newline byte only: str.splitlines would also split at U+2028 inside an answer.
        for number, line in enumerate(data[: self._end].split(b"\n")[:-1], 1):
            if not line.strip():
                continue
            try:
                record = EvalRecord.from_dict(json.loads(line))
            except (ValueError, TypeError) as err:
                raise StoreError(
                    f"{self.path} line {number} is not a record ({err}): delete that line, "
                    "or start in a new output folder"
                ) from err
            latest[record.key] = record
        self._latest = latest
        return latest

    def records(self) -> list[EvalRecord]:
        """Every stored record, the last one of each key, in the order keys first appeared."""
        return list(self._load().values())

    def done(self) -> set[Key]:
        """Keys whose sample needs no new run (any record but an infrastructure error)."""
        return {key for key, r in self._load().items() if r.verdict != "error"}

    def append(self, records: Iterable[EvalRecord]) -> int:
        """Append a batch of records and flush it to disk; returns how many were written."""
        batch = list(records)
        if not batch:
            return 0
        latest = self._load()
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size > self._end:
            os.truncate(self.path, self._end)  # a line torn by a kill: resume from the last whole record
        lines = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in batch)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
            os.fsync(out.fileno())
        self._end = self.path.stat().st_size
        for record in batch:
            latest[record.key] = record
        return len(batch)
