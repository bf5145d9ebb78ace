"""What a run's worker calls will cost, and the least time the rate limits allow them, before it starts.

Every figure is a low-high range from what is known before the first call (docs/guide/spend.md):

- calls: each sample (a rollout, an evaluated answer) makes from `calls_per_sample.low` to
  `.high` worker calls; a Conductor's plan has 1 to `max_steps` steps at each recursion level;
- a call's cost: its worker's price times its tokens. Input: the prompt's tokens (the question
  and the worker prompt), and at most, the earlier answers a step may read. Output: for a
  simulated worker its declared `output_tokens` (drawn between 0.5x and 1.5x); for a real worker
  what its calls in the spend journal used (fewest to most), else anything from one token to its
  `max_tokens`. The low cost is the cheapest worker's, the high one the dearest's;
- time: the rate limits alone. Low: every call spread over the workers' combined RPM; high: every
  call on the slowest worker. None when a worker has no limit (nothing bounds it).

A resumed run's own journal says more: the cost of its finished iterations, from the cheapest to
the dearest, times the iterations still to run, and so their wall time: an iteration's is the time
from its first call to the next iteration's first call in the same session (`from_iterations`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conductor_rl.config import Config, WorkerConfig
from conductor_rl.data import Question
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.limits import CHARS_PER_TOKEN
from conductor_rl.workers.providers.base import Usage
from conductor_rl.workers.spend_journal import Books

# Tokens of a worker prompt around its subtask (conductor_rl/plan/prompts.py); an estimate.
PROMPT_OVERHEAD_TOKENS = 60


class ForecastOverBudgetError(ValueError):
    """Even the low forecast is over the budget (the message gives the figures and the fix)."""


@dataclass(frozen=True)
class Range:
    low: float
    high: float

    def times(self, factor: float) -> Range:
        return Range(self.low * factor, self.high * factor)


@dataclass(frozen=True)
class Forecast:
    samples: int
    calls: Range
    usd: Range
    call_seconds: Range | None  # what the rate limits alone impose; None: some worker is unlimited
    basis: str  # where the cost per call comes from
    wall_seconds: Range | None = None  # a resumed run's, at its finished iterations' pace

    def describe(self, what: str) -> str:
        time = (
            f"; at least {_duration(self.call_seconds.low)} (at most {_duration(self.call_seconds.high)}) "
            f"for the workers' rate limits"
            if self.call_seconds is not None
            else ""
        )
        if self.wall_seconds is not None:
            time += (
                f"; {_duration(self.wall_seconds.low)}-{_duration(self.wall_seconds.high)} of wall time "
                "at its iterations' pace"
            )
        return (
            f"forecast for {what}: {self.samples:,} samples, {self.calls.low:,.0f}-{self.calls.high:,.0f} worker "
            f"calls, ${self.usd.low:,.4f}-${self.usd.high:,.4f}{time} ({self.basis})"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "samples": self.samples,
            "calls": [self.calls.low, self.calls.high],
            "usd": [self.usd.low, self.usd.high],
            "call_seconds": None if self.call_seconds is None else [self.call_seconds.low, self.call_seconds.high],
            "basis": self.basis,
            "wall_seconds": None if self.wall_seconds is None else [self.wall_seconds.low, self.wall_seconds.high],
        }

    def check_budget(self, budget_usd: float | None, setting: str) -> None:
        """Raise ForecastOverBudgetError when even the low forecast is over `budget_usd`; `setting`
        names where the budget is set."""
        if budget_usd is not None and self.usd.low > budget_usd:
            raise ForecastOverBudgetError(
                f"the run would cost at least ${self.usd.low:,.4f} (forecast ${self.usd.low:,.4f}-"
                f"${self.usd.high:,.4f}: {self.basis}), over its ${budget_usd:,.4f} budget. Raise {setting}, "
                f"make the run smaller, or pass --force to start anyway (it stops at the budget)"
            )


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.1f} min"


def output_tokens(worker: WorkerConfig, books: Books | None = None) -> tuple[Range, str]:
    """A call's output tokens on `worker` (fewest, most) and where the figure comes from."""
    seen = [e.get("out", 0) for e in (books.billed if books else []) if e["worker"] == worker.name]
    if seen:
        return Range(min(seen), max(seen)), "journal"
    if worker.provider == "sim" and worker.sim is not None:
        declared = worker.sim.output_tokens
        return Range(min(0.5 * declared, worker.max_tokens), min(1.5 * declared, worker.max_tokens)), "declared"
    return Range(1, worker.max_tokens), "max_tokens"


def call_cost(workers: Sequence[WorkerConfig], input_tokens: int, reads: int, outputs: dict[str, Range]) -> Range:
    """One call's cost: the cheapest worker reading nothing, to the dearest reading `reads` earlier
    answers, each as long as the longest output of the pool (`outputs`: each worker's output tokens)."""
    longest = max(r.high for r in outputs.values())
    low = min(cost_of(Usage(input_tokens, int(outputs[w.name].low)), w.price) for w in workers)
    high = max(cost_of(Usage(input_tokens + int(reads * longest), int(outputs[w.name].high)), w.price) for w in workers)
    return Range(low, high)


def forecast(
    workers: Sequence[WorkerConfig],
    samples: int,
    calls_per_sample: Range,
    question_tokens: int,
    books: Books | None = None,
) -> Forecast:
    """The forecast of `samples` samples of `calls_per_sample` calls each on `workers`;
    `question_tokens`: a question's tokens (the mean of the run's questions)."""
    priced = [w for w in workers if w.provider != "conductor"]  # the Conductor's own seat costs no API call
    if not priced:
        return Forecast(samples, Range(0, 0), Range(0.0, 0.0), None, "no priced worker")
    outputs = {w.name: output_tokens(w, books) for w in priced}
    per_call = call_cost(
        priced,
        question_tokens + PROMPT_OVERHEAD_TOKENS,
        int(calls_per_sample.high) - 1,
        {name: tokens for name, (tokens, _) in outputs.items()},
    )
    calls = calls_per_sample.times(samples)
    sources = sorted({source for _, source in outputs.values()})
    basis = "output tokens from " + " and ".join(
        {
            "journal": "this run's spend journal",
            "declared": "the simulated workers' output_tokens",
            "max_tokens": "one token to max_tokens",
        }[s]
        for s in sources
    )
    return Forecast(
        samples,
        calls,
        Range(calls.low * per_call.low, calls.high * per_call.high),
        rate_limited_seconds(priced, calls),
        basis,
    )


def rate_limited_seconds(workers: Sequence[WorkerConfig], calls: Range) -> Range | None:
    limits = [w.rpm for w in workers]
    if any(rpm is None for rpm in limits):
        return None
    rpms = [float(rpm) for rpm in limits if rpm is not None]
    return Range(calls.low / sum(rpms) * 60, calls.high / min(rpms) * 60)


def from_iterations(books: Books, start: int, samples: int, remaining: int) -> Forecast | None:
    """A resumed run's forecast from its journal: the cheapest and the dearest of the iterations before
    `start` (finished: the checkpoint holds them) times the `remaining` iterations. None when the
    journal holds none of them."""
    by_iteration: dict[int, list[dict]] = {}
    for event in [*books.billed, *books.lost]:
        if event.get("it", start) < start:
            by_iteration.setdefault(event["it"], []).append(event)
    if not by_iteration:
        return None
    costs = [sum(e["usd"] for e in events) for events in by_iteration.values()]
    calls = [len(events) for events in by_iteration.values()]
    periods = iteration_seconds(books, start)
    return Forecast(
        samples,
        Range(min(calls) * remaining, max(calls) * remaining),
        Range(min(costs) * remaining, max(costs) * remaining),
        None,
        f"this run's {len(by_iteration)} finished iteration(s) in its spend journal",
        Range(min(periods) * remaining, max(periods) * remaining) if periods else None,
    )


def iteration_seconds(books: Books, start: int) -> list[float]:
    """The wall time of each finished iteration (before `start`) whose next one began in the same
    session: from its first call to the next one's (a crash's gap between sessions is no one's)."""
    first: dict[tuple[int, int], float] = {}
    for event in [*books.billed, *books.lost, *books.failed]:
        sent = books.sent(event)
        if "it" in sent and "s" in sent:
            key = (sent["s"], sent["it"])
            first[key] = min(first.get(key, sent["t"]), sent["t"])
    return [
        first[(session, it + 1)] - t for (session, it), t in first.items() if it < start and (session, it + 1) in first
    ]


def training_forecast(config: Config, questions: Sequence[Question], books: Books, start: int) -> Forecast:
    """The forecast of a training run's iterations from `start` on, over `questions`: from its own
    journal once an iteration has finished there, else from the configuration."""
    t, c = config.train, config.conductor
    remaining = max(t.iterations - start, 0)
    samples = remaining * t.questions_per_iteration * t.rollouts_per_question
    seen = from_iterations(books, start, samples, remaining)
    if seen is not None:
        return seen
    chars = sum(len(q.question) for q in questions) / max(len(questions), 1)
    # A plan has 1 to max_steps steps; each recursion level may add as many again.
    steps = Range(1, c.max_steps * (c.max_depth + 1))
    return forecast(config.workers, samples, steps, int(chars / CHARS_PER_TOKEN), books)


def summed(parts: Sequence[Forecast], what: str) -> Forecast:
    """Several forecasts as one (an evaluation's methods): samples, calls, dollars and the time add up."""
    seconds = [p.call_seconds for p in parts]
    return Forecast(
        sum(p.samples for p in parts),
        Range(sum(p.calls.low for p in parts), sum(p.calls.high for p in parts)),
        Range(sum(p.usd.low for p in parts), sum(p.usd.high for p in parts)),
        None
        if not parts or any(s is None for s in seconds)
        else Range(sum(s.low for s in seconds if s), sum(s.high for s in seconds if s)),
        what,
    )
