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
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

from conductor_rl.workers.providers.base import ProviderError, Usage


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


class CostLedger:
    def __init__(self, budget_usd: float | None = None) -> None:
        if budget_usd is not None and budget_usd < 0:
            raise ValueError(f"budget_usd must be >= 0, got {budget_usd}")
        self.budget_usd = budget_usd
        self.iteration = 0
        self.entries: list[LedgerEntry] = []
        self._total = Totals()
        self._by: dict[str, dict[object, Totals]] = {
            k: defaultdict(Totals) for k in ("worker", "provider", "iteration")
        }
        self._unsettled = Totals()
        self._open: dict[str, OpenCall] = {}
        self._closed_early: set[str] = set()  # closed before their open_call arrived (Ray may reorder them)

    def start_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    def admit(self) -> None:
        """Raise BudgetExceededError if no new call may start."""
        if self.budget_usd is not None and self.exhausted:
            raise BudgetExceededError(self._total.cost_usd, self.budget_usd)

    @property
    def exhausted(self) -> bool:
        return self.budget_usd is not None and self._total.cost_usd >= self.budget_usd

    def record(
        self,
        worker: str,
        provider: str,
        usage: Usage,
        cost_usd: float,
        iteration: int | None = None,
        call_id: str | None = None,
    ) -> bool:
        """Add one finished call (always accepted), closing `call_id` if it was
        opened. Returns whether the budget is now exhausted."""
        opened = self._close(call_id)
        if iteration is None:
            iteration = opened.iteration if opened is not None else self.iteration
        self._add(LedgerEntry(worker, provider, iteration, usage, cost_usd))
        return self.exhausted

    def open_call(self, call_id: str, worker: str, provider: str, max_cost_usd: float, admit: bool = True) -> None:
        """A call is about to be sent: admit it (BudgetExceededError past the
        budget; skipped with `admit=False`) and hold its worst-case cost until
        `record` or `close_call` closes it."""
        if admit:
            self.admit()
        if call_id in self._closed_early:
            self._closed_early.discard(call_id)
            return
        self._open[call_id] = OpenCall(worker, provider, self.iteration, max_cost_usd)

    def close_call(self, call_id: str) -> None:
        """A call that failed without being billed (the provider refused it)."""
        self._close(call_id)

    def settle_open_calls(self) -> int:
        """Count each call still open as spent, at its worst-case cost, and
        return how many there were. Only call it when no call is in flight (the
        trainer does, after each round of rollouts): an open call is then one
        whose process died before it could say what happened."""
        for call in self._open.values():
            entry = LedgerEntry(call.worker, call.provider, call.iteration, Usage(), call.max_cost_usd)
            self._add(entry)
            self._unsettled.add(entry)
        settled, self._open = len(self._open), {}
        return settled

    def _close(self, call_id: str | None) -> OpenCall | None:
        if call_id is None:
            return None
        opened = self._open.pop(call_id, None)
        if opened is None:
            self._closed_early.add(call_id)
        return opened

    def _add(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)
        self._total.add(entry)
        self._by["worker"][entry.worker].add(entry)
        self._by["provider"][entry.provider].add(entry)
        self._by["iteration"][entry.iteration].add(entry)

    @property
    def total_usd(self) -> float:
        return self._total.cost_usd

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
