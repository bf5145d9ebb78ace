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
replica on every node reports to), and any tool reads it (`jq`, pandas, DuckDB). A call is
opened on disk before it is sent and closed on disk before its answer is used, so a crash
at any moment leaves every call that may have been billed on the books.

One writer per journal: the writer holds an exclusive lock (`spend.jsonl.lock`, naming its
pid and host) for its life, and a second process on the same folder is refused
(`JournalLockedError`), so two jobs never settle each other's calls in flight. A write that
fails (a full disk, a short write, the file deleted under it) is rolled back to the last
whole line and kept to be written again; the journal is then `failed`, and the ledger
admits no new call, so the run stops with every billed call still journaled once space
returns. A reader skips a line that is not an event (torn by a crash, or by a write that
could not be rolled back), says where (its byte offset), and keeps an event glued behind it.

The journal holds no prompts, answers or keys: names, token counts, dollars and keys of
what a call was for (question, rollout, step).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL_FILE = "spend.jsonl"
EVENTS = ("session", "open", "billed", "failed", "lost", "request")


log = logging.getLogger(__name__)


class JournalLockedError(RuntimeError):
    """Another process writes this journal: a second writer would count its calls twice."""


class JournalWriteError(OSError):
    """The journal could not be written (a full disk, an I/O error, the file deleted): no new call
    may be sent until it can be; the events not yet written are kept."""


LOCK_SUFFIX = ".lock"


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
        self.failed: JournalWriteError | None = None  # the first write that failed (sticky: the run stops)
        self._lock = _lock_writer(self.path)
        _drop_torn_tail(self.path)
        self._open_file()

    def _open_file(self) -> None:
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held open for the run
        self._identity = _identity(os.fstat(self._file.fileno()))
        self._size = os.fstat(self._file.fileno()).st_size  # the end of the last whole line written

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
            self._fsync_due = asyncio.get_running_loop().call_later(FSYNC_WITHIN_S, self._fsync_soon)

    def _write(self) -> None:
        """Write the buffer whole, or roll the file back to its last whole line and keep the buffer
        (raising JournalWriteError): never a torn line in the middle, never an event marked written
        that is not."""
        if not self._buffer:
            return
        self._follow_the_path()
        upto, data = self._added, "".join(line + "\n" for line in self._buffer).encode()
        done = 0
        try:
            while done < len(data):
                n = self._file.write(data[done:])  # unbuffered: a short write returns what it wrote
                if not n:
                    raise OSError(errno.EIO, "the write wrote nothing")
                done += n
        except OSError as err:
            self._roll_back()
            raise self._fail(f"a write failed ({err})") from err
        self._size += done
        self._written, self._buffer = upto, []

    def _roll_back(self) -> None:
        try:
            os.ftruncate(self._file.fileno(), self._size)
        except OSError:  # the torn bytes stay; a newline first keeps the next event on a line of its own
            self._buffer.insert(0, "")
            self._size = os.fstat(self._file.fileno()).st_size

    def _follow_the_path(self) -> None:
        """A journal deleted or replaced under the run: the events from here go to a new file at the
        path (what was written before is wherever the user moved it), and the run stops."""
        try:
            same = _identity(os.stat(self.path)) == self._identity
        except FileNotFoundError:
            same = False
        if not same:
            self._fail("the file was deleted or replaced while this job was writing it")
            self._file.close()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._open_file()  # what this job still has to write is not lost with the old file
            except OSError as err:
                self._file = open(os.devnull, "ab", buffering=0)  # noqa: SIM115 - the next write retries
                self._identity = (-1, -1)
                raise self._fail(f"it cannot be created again ({err})") from err

    def _fail(self, why: str) -> JournalWriteError:
        error = JournalWriteError(
            f"spend journal {self.path}: {why}; no new worker call will be sent. The events not yet written "
            f"({len(self._buffer)}) are kept and written when the disk allows; free space (or restore the file) "
            f"and resume the run"
        )
        if self.failed is None:
            self.failed = error
            log.error("%s", error)
        return error

    def _fsync(self) -> None:
        if self._fsync_due is not None:
            self._fsync_due.cancel()
            self._fsync_due = None
        upto = self._written
        try:
            os.fsync(self._file.fileno())
        except OSError as err:
            raise self._fail(f"fsync failed ({err})") from err
        self._synced = upto

    def _fsync_soon(self) -> None:
        self._fsync_due = None
        try:
            self._fsync()
        except JournalWriteError:
            pass  # recorded in `failed`: the next call is refused

    def flush(self) -> None:
        """Write and fsync everything added."""
        self._write()
        self._fsync()

    def close(self) -> None:
        """Flush, close and let another process write the journal."""
        try:
            if not self._file.closed:
                self.flush()
                self._file.close()
        finally:
            if not self._lock.closed:
                self._lock.close()  # the kernel drops the lock with its last descriptor


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _lock_writer(path: Path) -> Any:
    """Hold the journal's lock file exclusively for the writer's life (flock: the kernel drops it when
    the process dies, however it dies), with the holder's pid and host written in it for the refusal."""
    lock_path = path.with_name(path.name + LOCK_SUFFIX)
    lock = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the writer's life
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise JournalLockedError(
            f"{path.parent} is in use: {holder} writes its spend journal {path}, and a second writer would "
            f"count calls twice. Give this job another output folder (train.output_dir=..., "
            f"evaluate.output_dir=..., serve.output_dir=...), or stop that process first"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"process {os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    return lock


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


def read_events(path: str | Path, skipped: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """The journal's events in order, read line by line. A last line still being written (or torn
    by a crash) is passed over in silence. A line before it that is not an event (bytes a torn write
    left) is skipped with a warning naming its byte offset (appended to `skipped`), keeping an event
    glued behind the torn bytes: only the torn part is lost, and it had no outcome on disk anyway."""
    path = Path(path)
    if not path.exists():
        return
    offset = 0
    with open(path, "rb") as f:
        for raw in f:
            start, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                return  # the last line, being written
            if not raw.strip():
                continue
            try:
                yield _event(raw)
            except ValueError:
                glued = _glued_event(raw)
                log.warning(
                    "%s: skipped %d byte(s) at byte offset %d that are not a journal event (a torn write)%s",
                    path,
                    len(raw) - (len(glued[1]) if glued else 0),
                    start,
                    "; kept the event after them" if glued else "",
                )
                if skipped is not None:
                    skipped.append(start)
                if glued:
                    yield glued[0]


def _event(raw: bytes) -> dict[str, Any]:
    event = json.loads(raw)
    if not isinstance(event, dict) or event.get("ev") not in EVENTS:
        raise ValueError("not an event")
    return event


def _glued_event(raw: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The whole event at the end of a line whose start is torn (every event begins `{"t":`)."""
    at = raw.rfind(b'{"t":')
    while at > 0:
        try:
            return _event(raw[at:]), raw[at:]
        except ValueError:
            at = raw.rfind(b'{"t":', 0, at)
    return None


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
    skipped: list[int] = field(default_factory=list)  # byte offsets of lines that were not events (torn)
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
    for event in read_events(path, books.skipped):
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


@dataclass(frozen=True)
class ClientEvent:
    """A served client's use of the server, as the journal holds it: an admitted request (`usd` None)
    or a call's bill (billed, or lost at its worst case), at journal time `t`."""

    t: float
    client: str
    usd: float | None = None


def client_events(path: str | Path, horizon_s: float = 3600.0) -> Iterator[ClientEvent]:
    """Each served client's requests and spend in the journal at `path`, streamed in bounded memory
    (a serve restart reads a journal of any length): a request's client is kept for `horizon_s`
    seconds after its admission (every call of a request is opened while it runs, within
    serve.timeout_s), and a call's client from its open until its outcome."""
    tags: dict[str, tuple[float, str]] = {}  # request id -> (admitted at, client), oldest first
    calls: dict[str, str] = {}  # an open call's id -> its client
    early: dict[str, dict[str, Any]] = {}  # outcomes read before their open (Ray does not order them)
    for event in read_events(path):
        kind, t = event["ev"], event["t"]
        _forget_before(tags, t - horizon_s, lambda tag: tag[0])
        _forget_before(early, t - REORDER_S, lambda outcome: outcome["t"])
        call_id = str(event.get("id") or "")
        if kind == "request":
            tags[event["q"]] = (t, event["client"])
            yield ClientEvent(t, event["client"])
        elif kind == "open" and "q" in event and event["q"] in tags:
            client = tags[event["q"]][1]
            outcome = early.pop(call_id, None)
            if outcome is None:
                calls[call_id] = client
            elif outcome["ev"] != "failed":
                yield ClientEvent(outcome["t"], client, outcome["usd"])
        elif kind in ("billed", "lost", "failed") and call_id:
            client = calls.pop(call_id, "")
            if client and kind != "failed":
                yield ClientEvent(t, client, event["usd"])
            elif not client:  # its open may come next; else not a served call, forgotten soon
                early[call_id] = event


REORDER_S = 60.0  # an outcome journaled before its open is followed by it well within this


def _forget_before(entries: dict[str, Any], oldest: float, time_of: Callable[[Any], float]) -> None:
    """Drop the entries, oldest first, from before `oldest`."""
    while entries:
        first = next(iter(entries))
        if time_of(entries[first]) >= oldest:
            return
        del entries[first]


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
