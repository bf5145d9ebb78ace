"""The spend journal: every worker call's cost on disk before its result is used.

One JSON object per line in `spend.jsonl` under a run's folder, appended and never
rewritten (docs/guide/spend.md):

    session   a job started on the folder, or resumed on it (`session` counts them from 1)
    open      a call is about to be sent: its worker, model, what it is for, its worst-case cost
    billed    it came back: the tokens and dollars the provider billed (outcome "ok")
    failed    the provider refused or failed it (outcome: the error's kind): nothing billed
    lost      no outcome will ever come (its process died mid-call, or the job did):
              counted at its worst-case cost, since the provider may have billed it
    request   a served request (`q`, its id) was admitted for a client (`client`: the
              name its token was given, never the token)

Why JSON lines: one writer appends (the run's ledger; on a cluster its actor, which every
replica on every node reports to), so no locking is needed; a crash can only tear the last
line, which the reader skips; and any tool reads it (`jq`, pandas, DuckDB). A call is
opened on disk before it is sent and closed on disk before its answer is used, so a crash
at any moment leaves every call that may have been billed on the books.

The journal holds no prompts, answers or keys: names, token counts, dollars and keys of
what a call was for (question, rollout, step).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL_FILE = "spend.jsonl"
EVENTS = ("session", "open", "billed", "failed", "lost", "request")


class JournalError(ValueError):
    """The journal cannot be read (the message names the line)."""


#: An event written but not yet fsync'd reaches the disk within this long (see `durable`).
FSYNC_WITHIN_S = 0.01


class SpendJournal:
    """Appends events to one journal file. `add` buffers; `flush` writes everything added and
    fsyncs it; `durable` does the same for callers of one event loop, sharing the work."""

    def __init__(self, path: str | Path, *, sync: bool = False) -> None:
        """`sync`: every `add` is flushed at once (one process, no batching)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.sync = sync
        self._buffer: list[str] = []
        self._added = 0  # events added, ever
        self._written = 0  # of which written to the file (they survive the death of this process)
        self._synced = 0  # of which fsync'd (they survive the machine's)
        self._fsync_due: asyncio.TimerHandle | None = None
        _drop_torn_tail(self.path)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held open for the run

    def add(self, event: dict[str, Any]) -> None:
        if event.get("ev") not in EVENTS:
            raise ValueError(f"unknown journal event {event.get('ev')!r}; one of {EVENTS}")
        self._buffer.append(json.dumps({"t": round(time.time(), 3), **event}, separators=(",", ":")))
        self._added += 1
        if self.sync:
            self.flush()

    async def durable(self, fsync: bool = True) -> None:
        """Return once every event added so far is written to the file, and with `fsync` also on
        disk. Callers that the event loop runs together share one write and one fsync (each
        first lets the others add theirs). Without `fsync` (a call's open: it must be written
        before the call is sent, and a write survives the death of any process) the fsync
        follows within FSYNC_WITHIN_S, or with the next caller that asks for one. The writes
        block the loop: on a local disk an fsync takes a fraction of a millisecond, less than
        a hand-off to a thread (benchmarks/worker_pool.py)."""
        target = self._added
        await asyncio.sleep(0)
        if self._written < target:
            self._write()
        if fsync:
            if self._synced < target:
                self._fsync()
        elif self._synced < self._written and self._fsync_due is None:
            self._fsync_due = asyncio.get_running_loop().call_later(FSYNC_WITHIN_S, self._fsync)

    def _write(self) -> None:
        upto, lines, self._buffer = self._added, self._buffer, []
        self._file.write("".join(line + "\n" for line in lines).encode())
        self._written = upto

    def _fsync(self) -> None:
        if self._fsync_due is not None:
            self._fsync_due.cancel()
            self._fsync_due = None
        upto = self._written
        os.fsync(self._file.fileno())
        self._synced = upto

    def flush(self) -> None:
        """Write and fsync everything added."""
        self._write()
        self._fsync()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()


def _drop_torn_tail(path: Path, chunk: int = 65_536) -> None:
    """Cut a last line that a crash left without its newline. Its write never returned, so
    whoever wrote it went no further: an open whose call was never sent, or a close whose
    call stays open on the books (and is counted at its worst case). Reads the file from its
    end, back to the last newline only."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        cut = end
        while cut > 0:
            start = max(cut - chunk, 0)
            f.seek(start)
            newline = f.read(cut - start).rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            cut = start
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """The journal's events in order. A last line still being written (or torn by a crash)
    is skipped; a broken line before it is an error: the books would be wrong without it."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield json.loads(raw)
        except ValueError:
            if number < len(lines):  # a whole line (it ends with a newline), yet unreadable
                raise JournalError(
                    f"{path}, line {number}: not a JSON object; the journal was edited or the disk is "
                    f"failing (restore the file from a backup)"
                ) from None


@dataclass
class Books:
    """A journal read whole: `billed` and `lost` calls (the spend), `failed` ones (not billed),
    `open` ones (no outcome yet: in flight, or cut off by a crash that no later session has
    settled) and the `sessions`, each as its events."""

    billed: list[dict[str, Any]] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    open: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    opens: dict[str, dict[str, Any]] = field(default_factory=dict)  # every open event, by call id
    requests: list[dict[str, Any]] = field(default_factory=list)  # served requests, each with its client
    clients: dict[str, str] = field(default_factory=dict)  # a served request's id -> its client

    def sent(self, event: dict[str, Any]) -> dict[str, Any]:
        """The open event of a call's outcome (when and by which session it was sent, what it was
        for); the event itself for a call recorded without an open."""
        return self.opens.get(str(event.get("id") or ""), event)

    def client_of(self, event: dict[str, Any]) -> str:
        """The client whose served request made a call ("" outside `serve`)."""
        return self.clients.get(str(self.sent(event).get("q", "")), "")

    @property
    def spent_usd(self) -> float:
        """Billed calls, and lost ones at their worst case."""
        return sum(e["usd"] for e in self.billed) + sum(e["usd"] for e in self.lost)

    @property
    def at_most_usd(self) -> float:
        """The spend, and every open call at its worst case."""
        return self.spent_usd + sum(e["max_usd"] for e in self.open)


def read_books(path: str | Path) -> Books:
    """The journal at `path` as books (empty when there is none)."""
    books = Books()
    opened: dict[str, dict[str, Any]] = {}
    closed: set[str] = set()  # an outcome may come before its open (Ray does not order them)
    for event in read_events(path):
        kind, call_id = event["ev"], str(event.get("id") or "")  # "": recorded without an open
        if kind == "session":
            books.sessions.append(event)
        elif kind == "request":
            books.requests.append(event)
            books.clients[event["q"]] = event["client"]
        elif kind == "open":
            books.opens[call_id] = event
            if call_id not in closed:
                opened[call_id] = event
        else:
            if opened.pop(call_id, None) is None and call_id:
                closed.add(call_id)
            {"billed": books.billed, "lost": books.lost, "failed": books.failed}[kind].append(event)
    books.open = list(opened.values())
    return books


#: What `totals_by` groups calls by: an event field, or "job" (its session's) and "day" (UTC).
GROUPS = ("worker", "model", "provider", "it", "cell", "s", "job", "day", "client")


def totals_by(books: Books, key: str) -> list[dict[str, Any]]:
    """Spend grouped by `key` (one of GROUPS), largest first: calls billed, calls lost (at their
    worst case), tokens and dollars of each group."""
    if key not in GROUPS:
        raise ValueError(f"cannot group spend by {key!r}; one of {', '.join(GROUPS)}")
    jobs = {e["session"]: e.get("job", "") for e in books.sessions}

    def group(event: dict[str, Any]) -> Any:
        # A call lost to a crash is settled by a later session: it belongs to the one that sent it.
        sent = books.sent(event)
        if key == "job":
            return jobs.get(sent.get("s"), "")
        if key == "day":
            return time.strftime("%Y-%m-%d", time.gmtime(sent["t"]))
        if key == "client":
            return books.client_of(event)
        return (sent if key == "s" else event).get(key, "")

    rows: dict[Any, dict[str, Any]] = {}
    for event in [*books.billed, *books.lost]:
        name = group(event)
        row = rows.setdefault(
            name, {key: name, "calls": 0, "lost": 0, "input_tokens": 0, "output_tokens": 0, "usd": 0.0}
        )
        row["calls"] += 1
        row["lost"] += event["ev"] == "lost"
        row["input_tokens"] += event.get("in", 0)
        row["output_tokens"] += event.get("out", 0)
        row["usd"] += event["usd"]
    return sorted(rows.values(), key=lambda r: -r["usd"])


def call_rows(books: Books) -> list[dict[str, Any]]:
    """One row per call that cost or may cost money (billed, lost, still open), for export."""
    columns = ("t", "s", "id", "worker", "provider", "model", "it", "cell", "q", "rollout", "step", "client")
    numbers = ("in", "out", "reasoning", "cached")
    rows = []
    for status, events in (("billed", books.billed), ("lost", books.lost), ("open", books.open)):
        for event in events:
            merged = {**books.sent(event), **event, "client": books.client_of(event)}
            rows.append(
                {
                    "status": status,
                    **{c: merged.get(c) for c in columns},
                    **{n: merged.get(n, 0) for n in numbers},
                    "usd": merged["usd"] if status != "open" else merged["max_usd"],
                }
            )
    return rows
