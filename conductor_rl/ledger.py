"""The cost ledger: every finished worker call's usage and cost, by worker,
provider and training iteration, and a budget cap.

Budget: `admit()` is asked before a call starts. Once the total reaches the
budget it raises `BudgetExceededError`, so no new call starts; calls already in
flight still finish and `record` always accepts them, so no finished call's
cost is lost. The caller (the trainer) checkpoints and stops.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

from conductor_rl.providers.base import ProviderError, Usage


class BudgetExceededError(ProviderError):
    """The spending cap is reached: no new worker call may start.

    A ProviderError (kind `budget_exceeded`, not retryable), so that `run_plan`
    records the step as an infrastructure error (reward None, never a score)
    while its other calls in flight finish; the trainer checks `exhausted`
    (or catches this from a direct call), checkpoints and stops."""

    def __init__(self, spent_usd: float, budget_usd: float) -> None:
        super().__init__(
            f"worker budget reached: spent ${spent_usd:.4f} of ${budget_usd:.4f}; no new worker call will start. "
            f"Raise the budget (CostLedger(budget_usd=...)) and resume from the last checkpoint",
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


class CostLedger:
    def __init__(self, budget_usd: float | None = None) -> None:
        if budget_usd is not None and budget_usd < 0:
            raise ValueError(f"budget_usd must be >= 0, got {budget_usd}")
        self.budget_usd = budget_usd
        self.iteration = 0
        self.entries: list[LedgerEntry] = []
        self._total = Totals()
        self._by: dict[str, dict[object, Totals]] = {k: defaultdict(Totals) for k in ("worker", "provider", "iteration")}

    def start_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    def admit(self) -> None:
        """Raise BudgetExceededError if no new call may start."""
        if self.exhausted:
            raise BudgetExceededError(self._total.cost_usd, self.budget_usd)

    @property
    def exhausted(self) -> bool:
        return self.budget_usd is not None and self._total.cost_usd >= self.budget_usd

    def record(self, worker: str, provider: str, usage: Usage, cost_usd: float, iteration: int | None = None) -> bool:
        """Add one finished call (always accepted). Returns whether the budget is now exhausted."""
        entry = LedgerEntry(worker, provider, self.iteration if iteration is None else iteration, usage, cost_usd)
        self.entries.append(entry)
        self._total.add(entry)
        self._by["worker"][worker].add(entry)
        self._by["provider"][provider].add(entry)
        self._by["iteration"][entry.iteration].add(entry)
        return self.exhausted

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
        for key in self._by:
            restored: dict[object, Totals] = defaultdict(Totals)
            for name, totals in summary.get(f"by_{key}", {}).items():
                restored[int(name) if key == "iteration" else name] = Totals(**totals)
            self._by[key] = restored

    def summary(self) -> dict:
        return {"total": asdict(self._total), "budget_usd": self.budget_usd,
                **{f"by_{k}": {str(n): asdict(t) for n, t in v.items()} for k, v in self._by.items()}}
