"""The cost ledger: every finished worker call's usage and cost, by worker,
provider and training iteration, and a budget cap.

Budget: `admit()` is asked before a call starts. Once the total reaches the
budget it raises `BudgetExceededError`, so no new call starts; calls already in
flight still finish and `record` always accepts them, so no finished call's
cost is lost. The caller (the trainer) checkpoints and stops.

Calls whose outcome is never seen: each call is opened (`open_call`, with its
worst-case cost) before it is sent and closed by `record` or `close_call`. A
process that dies mid-call (a worker replica) closes nothing, and the provider
may still have billed the call; `settle_open_calls`, run when nothing is in
flight, counts every call left open at its worst-case cost (`unsettled` in the
summary), so the spend and the budget never forget it.

With a spend journal (conductor_rl/workers/spend_journal.py) every open, outcome
and settlement is also written there, and `CostLedger.from_journal` rebuilds the
ledger from it: a resumed run's books and budget count every call of the runs
before it, including those of an iteration a crash cut short.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conductor_rl.workers.providers.base import CallKey, ProviderError, Usage
from conductor_rl.workers.spend_journal import JournalWriteError, SpendJournal, read_events

#: The error kinds with which the ledger refuses a new call: the run stops, it is not the worker's fault.
NO_NEW_CALLS = ("budget_exceeded", "journal_failed")
#: The most recent calls a ledger keeps one by one (for inspection); its totals count every call.
RECENT_ENTRIES = 10_000


class BudgetExceededError(ProviderError):
    """The spending cap is reached: no new worker call may start.

    A ProviderError (kind `budget_exceeded`, not retryable), so that `run_plan`
    records the step as an infrastructure error (reward None, never a score)
    while its other calls in flight finish; the trainer checks `exhausted`
    (or catches this from a direct call), checkpoints and stops."""

    def __init__(self, spent_usd: float, budget_usd: float) -> None:
        super().__init__(
            f"worker budget reached: spent ${spent_usd:.4f} of the ${budget_usd:.4f} budget; no new worker call "
            f"will start. Raise the budget where it was set: train.budget_usd=... for training (a resumed run "
            f"counts what was spent), --budget-usd for conductor-rl ask, budget_usd= for Orchestrator.from_config "
            f"or CostLedger",
            kind="budget_exceeded",
        )
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd

    def __reduce__(self):  # survives pickling across Ray processes
        return (BudgetExceededError, (self.spent_usd, self.budget_usd))


class JournalFailedError(ProviderError):
    """The spend journal cannot be written: no new call may start, since its cost could not be kept.
    Stops the run as the budget does (kind `journal_failed`, not retryable)."""

    def __init__(self, message: str, **_: object) -> None:
        super().__init__(message, kind="journal_failed")


def refused_by_ledger(step_error: str | None) -> bool:
    """Whether a step's error (`kind: message`) is the ledger refusing new calls (budget, journal)."""
    return step_error is not None and step_error.split(":", 1)[0] in NO_NEW_CALLS


@dataclass(frozen=True)
class LedgerEntry:
    worker: str
    provider: str
    iteration: int
    usage: Usage
    cost_usd: float


@dataclass
class Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, entry: LedgerEntry) -> None:
        self.calls += 1
        self.input_tokens += entry.usage.input_tokens
        self.output_tokens += entry.usage.output_tokens
        self.reasoning_tokens += entry.usage.reasoning_tokens
        self.cached_tokens += entry.usage.cached_tokens
        self.cost_usd += entry.cost_usd


@dataclass(frozen=True)
class OpenCall:
    worker: str
    provider: str
    iteration: int
    max_cost_usd: float
    model: str = ""
    cell: str | None = None


class CostLedger:
    def __init__(self, budget_usd: float | None = None, journal: SpendJournal | None = None) -> None:
        """`journal`: where every call is written as well (see `from_journal` to continue one)."""
        if budget_usd is not None and budget_usd < 0:
            raise ValueError(f"budget_usd must be >= 0, got {budget_usd}")
        self.budget_usd = budget_usd
        self.journal = journal
        self.session = 0  # the journal's session this ledger writes (0: none)
        self.iteration = 0
        self.cell: str | None = None  # an evaluation's method/benchmark, where calls are charged
        self.entries: deque[LedgerEntry] = deque(maxlen=RECENT_ENTRIES)
        self._total = Totals()
        self._by: dict[str, dict[object, Totals]] = {
            k: defaultdict(Totals) for k in ("worker", "provider", "iteration")
        }
        self._unsettled = Totals()
        self._open: dict[str, OpenCall] = {}
        self._closed_early: set[str] = set()  # closed before their open_call arrived (Ray may reorder them)
        self._lost_early: set[str] = set()  # cut off (lose_call) before their open_call arrived

    @classmethod
    def from_journal(
        cls, path: str | Path, budget_usd: float | None = None, *, job: str, sync: bool = False
    ) -> CostLedger:
        """A ledger that continues the journal at `path` (created if missing) as a new session
        of `job` ("train", "evaluate", "serve", ...): every call the journal holds is on its
        books, and the budget counts it. A call still open when its session ended (the job
        died mid-call) is counted at its worst-case cost, and written down as lost."""
        ledger = cls(budget_usd)
        journal = SpendJournal(path, sync=sync)  # locked before it is read: no other writer from here
        session = 0
        opened: dict[str, dict[str, Any]] = {}  # calls without an outcome yet
        closed: set[str] = set()  # an outcome may come before its open (Ray does not order them)
        for event in read_events(path):  # streamed: only the totals and the open calls are kept
            kind, call_id = event["ev"], str(event.get("id") or "")
            if kind == "session":
                session = max(session, event["session"])
            elif kind == "open":
                if call_id in closed:
                    closed.discard(call_id)
                else:
                    opened[call_id] = event
            elif kind in ("billed", "lost"):
                ledger._add(_entry_of(event), lost=kind == "lost")
            if kind in ("billed", "lost", "failed") and opened.pop(call_id, None) is None and call_id:
                closed.add(call_id)
        ledger.journal, ledger.session = journal, session + 1
        ledger._log("session", session=ledger.session, job=job, budget_usd=budget_usd)
        for event in opened.values():
            ledger._open[event["id"]] = OpenCall(
                event["worker"],
                event["provider"],
                event.get("it", 0),
                event["max_usd"],
                event.get("model", ""),
                event.get("cell"),
            )
        ledger.settle_open_calls(why="its session ended before the call did")
        journal.flush()
        return ledger

    def start_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    def tag_request(self, request_id: str, client: str) -> None:
        """A served request of `client` was admitted: the journal ties its calls to the client."""
        self._log("request", q=request_id, client=client)

    def start_cell(self, cell: str | None) -> None:
        """An evaluation's calls from here are charged to `cell` (its method and benchmark)."""
        self.cell = cell

    def admit(self) -> None:
        """Raise BudgetExceededError or JournalFailedError if no new call may start."""
        if self.journal is not None and self.journal.failed is not None:
            raise JournalFailedError(str(self.journal.failed))
        if self.budget_usd is not None and self._total.cost_usd >= self.budget_usd:
            raise BudgetExceededError(self._total.cost_usd, self.budget_usd)

    @property
    def exhausted(self) -> bool:
        """No new call may start: the budget is spent, or the journal cannot be written."""
        return self.stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """ "budget", "journal" (its write failed), or None while calls may start."""
        if self.journal is not None and self.journal.failed is not None:
            return "journal"
        if self.budget_usd is not None and self._total.cost_usd >= self.budget_usd:
            return "budget"
        return None

    def record(
        self,
        worker: str,
        provider: str,
        usage: Usage,
        cost_usd: float,
        iteration: int | None = None,
        call_id: str | None = None,
        model: str = "",
    ) -> bool:
        """Add one finished call (always accepted), closing `call_id` if it was
        opened. Returns whether the budget is now exhausted."""
        opened = self._close(call_id)
        if iteration is None:
            iteration = opened.iteration if opened is not None else self.iteration
        cell = opened.cell if opened is not None else self.cell
        entry = LedgerEntry(worker, provider, iteration, usage, cost_usd)
        self._log(
            "billed",
            id=call_id,
            outcome="ok",
            usd=cost_usd,
            **_who_and_where(worker, provider, model, iteration, cell),
            **_usage_fields(usage),
        )
        self._add(entry)
        return self.exhausted

    def open_call(
        self,
        call_id: str,
        worker: str,
        provider: str,
        max_cost_usd: float,
        admit: bool = True,
        model: str = "",
        key: CallKey | None = None,
    ) -> None:
        """A call is about to be sent: admit it (BudgetExceededError past the
        budget; skipped with `admit=False`) and hold its worst-case cost until
        `record` or `close_call` closes it. `key`: what the call is for (the journal's)."""
        if admit:
            self.admit()
        if self.journal is not None:
            where = {"q": key.question, "rollout": key.rollout, "step": key.step} if key is not None else {}
            where |= _who_and_where(worker, provider, model, self.iteration, self.cell)
            self._log("open", id=call_id, max_usd=max_cost_usd, **where)
        if call_id in self._closed_early:
            self._closed_early.discard(call_id)
            return
        call = OpenCall(worker, provider, self.iteration, max_cost_usd, model, self.cell)
        if call_id in self._lost_early:
            self._lost_early.discard(call_id)
            self._settle_lost(call_id, call, "cancelled mid-call")
            return
        self._open[call_id] = call

    def close_call(self, call_id: str, outcome: str = "error") -> None:
        """A call that failed without being billed (the provider refused it); `outcome`: the error's kind."""
        self._log("failed", id=call_id, outcome=outcome)
        self._close(call_id)

    def lose_call(self, call_id: str, why: str) -> None:
        """A call cut off mid-flight (cancelled): no bill will come, and the provider may have billed
        it, so it is settled now as lost, at its worst-case cost."""
        call = self._open.pop(call_id, None)
        if call is None:  # its open has not arrived yet (Ray does not order them), or it is closed
            self._lost_early.add(call_id)
            return
        self._settle_lost(call_id, call, why)

    def settle_open_calls(self, why: str = "its process died mid-call") -> int:
        """Count each call still open as spent, at its worst-case cost, and
        return how many there were. Only call it when no call is in flight (the
        trainer does, after each round of rollouts): an open call is then one
        whose process died before it could say what happened."""
        for call_id, call in self._open.items():
            self._settle_lost(call_id, call, why)
        settled, self._open = len(self._open), {}
        return settled

    def _settle_lost(self, call_id: str, call: OpenCall, why: str) -> None:
        entry = LedgerEntry(call.worker, call.provider, call.iteration, Usage(), call.max_cost_usd)
        where = _who_and_where(call.worker, call.provider, call.model, call.iteration, call.cell)
        self._log("lost", id=call_id, outcome=why, usd=call.max_cost_usd, **where)
        self._add(entry, lost=True)

    def _close(self, call_id: str | None) -> OpenCall | None:
        if call_id is None:
            return None
        opened = self._open.pop(call_id, None)
        if opened is None:
            self._closed_early.add(call_id)
        return opened

    def _log(self, event: str, **fields: Any) -> None:
        if self.journal is not None:
            try:
                self.journal.add({"ev": event, "s": self.session, **{k: v for k, v in fields.items() if v is not None}})
            except JournalWriteError:
                pass  # kept in the journal's buffer; `journal.failed` now refuses every new call (admit)

    async def durable(self, fsync: bool = True, before_a_call: bool = False) -> None:
        """Return once what was logged is in the journal (see SpendJournal.durable). `before_a_call`: a
        call is about to be sent on the strength of it, so a failed write raises JournalFailedError
        (the call is not sent); an outcome's failed write is kept for later and raises nothing."""
        if self.journal is None:
            return
        try:
            await self.journal.durable(fsync)
        except JournalWriteError as err:
            if before_a_call:
                raise JournalFailedError(str(err)) from None

    def _add(self, entry: LedgerEntry, lost: bool = False) -> None:
        if lost:
            self._unsettled.add(entry)
        self.entries.append(entry)
        self._total.add(entry)
        self._by["worker"][entry.worker].add(entry)
        self._by["provider"][entry.provider].add(entry)
        self._by["iteration"][entry.iteration].add(entry)

    @property
    def total_usd(self) -> float:
        return self._total.cost_usd

    @property
    def open_usd(self) -> float:
        """The calls in flight (no outcome yet), at their worst case."""
        return sum(call.max_cost_usd for call in self._open.values())

    def totals(self) -> Totals:
        return Totals(**asdict(self._total))

    def by(self, key: str) -> dict[object, Totals]:
        """Totals grouped by "worker", "provider" or "iteration"."""
        return {k: Totals(**asdict(v)) for k, v in self._by[key].items()}

    def restore(self, summary: dict) -> None:
        """Carry the totals of an earlier run (a checkpoint's `summary()`) into
        this ledger, so a resumed run's budget counts what was already spent.
        Individual entries are not kept in checkpoints, only their totals."""
        self._total = Totals(**summary["total"])
        self._unsettled = Totals(**summary.get("unsettled", {}))
        for key in self._by:
            restored: dict[object, Totals] = defaultdict(Totals)
            for name, totals in summary.get(f"by_{key}", {}).items():
                restored[int(name) if key == "iteration" else name] = Totals(**totals)
            self._by[key] = restored

    def summary(self) -> dict:
        return {
            "total": asdict(self._total),
            "unsettled": asdict(self._unsettled),
            "budget_usd": self.budget_usd,
            **{f"by_{k}": {str(n): asdict(t) for n, t in v.items()} for k, v in self._by.items()},
        }


def _who_and_where(worker: str, provider: str, model: str, iteration: int, cell: str | None) -> dict[str, Any]:
    """A call's journal fields: who made it, and where it is charged (an iteration, or an evaluation cell)."""
    return {
        "worker": worker,
        "provider": provider,
        "model": model or None,
        "it": iteration if cell is None else None,
        "cell": cell,
    }


def _usage_fields(usage: Usage) -> dict[str, int]:
    return {
        "in": usage.input_tokens,
        "out": usage.output_tokens,
        "reasoning": usage.reasoning_tokens,
        "cached": usage.cached_tokens,
    }


def _entry_of(event: dict[str, Any]) -> LedgerEntry:
    usage = Usage(event.get("in", 0), event.get("out", 0), event.get("reasoning", 0), event.get("cached", 0))
    return LedgerEntry(event["worker"], event["provider"], event.get("it", 0), usage, event["usd"])
