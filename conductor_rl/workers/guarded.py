"""A worker call as the pool makes it: budget check, rate limit, retries, ledger.

`GuardedProvider` wraps any provider and is itself a provider, so `run_plan`
can use it unchanged. Its limiter and ledger are anything with the methods
below, sync or async: in one process the plain `AsyncRateLimiter` and
`CostLedger`; on a cluster, adapters around the shared Ray actors
(actors/worker_pool.py), so every replica sees the same limits and cost.

Each *attempt* (not each request) asks the ledger and the limiter first: a
retry is a new call for the provider's RPM (granted in the order of its
request's first attempt, so it keeps its place), and no call at all starts once
the budget is spent. A 429 puts the key into cooldown for everyone. The ledger holds
each attempt open, at its worst-case cost, until its outcome is known
(conductor_rl/workers/ledger.py), so a call lost with its process is still counted.

The limiter counts a call from when it was sent, as the caller measured it. A fresh
client's first requests leave well after that moment (the SDK builds its types and
connection first: tens of milliseconds on a quiet machine, seconds on a busy one),
so calls sent before this provider's first answer count from their own answer.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
import uuid
from typing import Any

from conductor_rl.config import Price
from conductor_rl.workers.costs import worst_case_cost
from conductor_rl.workers.limits import estimate_tokens
from conductor_rl.workers.providers.base import ProviderError, WorkerRequest, WorkerResponse
from conductor_rl.workers.retry import RetryPolicy, call_with_retries


class CallObserver:
    """Hooks for metrics; the default does nothing. Only the worker name is passed, never a key."""

    def call_finished(self, worker: str, response: WorkerResponse) -> None: ...
    def call_failed(self, worker: str, error: ProviderError) -> None: ...
    def retried(self, worker: str, error: ProviderError) -> None: ...
    def waited(self, worker: str, seconds: float) -> None: ...


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class GuardedProvider:
    def __init__(
        self,
        provider: Any,
        *,
        provider_kind: str,
        limiter: Any = None,
        ledger: Any = None,
        policy: RetryPolicy = RetryPolicy(),
        observer: CallObserver | None = None,
        rng: random.Random | None = None,
        check_budget: bool = True,
        price: Price | None = None,
        model: str = "",
        journaled: bool = False,
    ) -> None:
        """`price`: the worker's, for the worst-case cost of a call in flight (none: 0).
        `journaled`: the ledger writes a spend journal, so a call is sent only once its
        open is on disk (each open is awaited, even without a budget to check)."""
        self.provider = provider
        self.name = provider.name
        self.simulated = provider.simulated
        self.provider_kind = provider_kind
        self.limiter, self.ledger, self.policy = limiter, ledger, policy
        # False when the ledger has no budget: saves a round trip per call on a cluster.
        self.check_budget = check_budget
        self.journaled = journaled
        self.price = price
        self.model = model
        self.observer = observer or CallObserver()
        self.rng = rng or random.Random()
        self._warm_since: float | None = None  # when the first attempt came back (see the module's docstring)

    def __repr__(self) -> str:
        return f"GuardedProvider({self.provider!r})"

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        asked = time.time()  # the limiter grants in this order, retries included (wall clock: across nodes)
        try:
            return await call_with_retries(
                lambda: self._attempt(request, asked), self.policy, on_retry=self._on_retry, rng=self.rng
            )
        except ProviderError as err:
            self.observer.call_failed(self.name, err)
            raise

    async def _attempt(self, request: WorkerRequest, asked: float) -> WorkerResponse:
        call_id = uuid.uuid4().hex if self.ledger is not None else None
        if self.ledger is not None:
            opened = self.ledger.open_call(
                call_id,
                self.name,
                self.provider_kind,
                self.worst_case_cost(request),
                self.check_budget,
                self.model,
                request.key,
            )
        grant = None
        try:
            if self.ledger is not None and (self.check_budget or self.journaled):
                await _maybe_await(opened)  # admission, and the open on disk, before the call
            # else not awaited (a round trip saved): the ledger pairs it with `record` in either order
            if self.limiter is not None:
                grant, waited = await _maybe_await(
                    self.limiter.acquire(estimate_tokens(request.messages, request.max_tokens), asked)
                )
                if waited > 0:
                    self.observer.waited(self.name, waited)
        except asyncio.CancelledError:  # never sent: nothing to bill
            if self.ledger is not None:
                await _maybe_await(self.ledger.close_call(call_id, "cancelled before it was sent"))
            raise
        sent = time.perf_counter()
        try:
            response = await self.provider.complete(request)
        except BaseException as err:
            if grant is not None:  # a failed call still counted at the provider
                await _maybe_await(self.limiter.settle(grant, None, self._sent_ago(sent)))
            if self.ledger is not None and isinstance(err, ProviderError):
                # Refused or failed at the provider: not billed.
                await _maybe_await(self.ledger.close_call(call_id, err.kind))
            elif self.ledger is not None and isinstance(err, asyncio.CancelledError):
                # Cut off mid-call (a timeout, a client gone): the provider may have billed it, and no
                # bill will come, so it is settled now at its worst case. Anything else (the process
                # dying) leaves it open, for the next settling to count the same way.
                await _maybe_await(self.ledger.lose_call(call_id, "cancelled mid-call"))
            raise
        # From here the call has happened: record it before anything else can fail
        # (both at once: on a cluster each is an actor round trip).
        bookkeeping = []
        if self.ledger is not None:
            bookkeeping.append(
                _maybe_await(
                    self.ledger.record(
                        self.name,
                        self.provider_kind,
                        response.usage,
                        response.cost_usd,
                        call_id=call_id,
                        model=self.model,
                    )
                )
            )
        if grant is not None:
            bookkeeping.append(_maybe_await(self.limiter.settle(grant, response.usage.total, self._sent_ago(sent))))
        await asyncio.gather(*bookkeeping)
        self.observer.call_finished(self.name, response)
        return response

    def _sent_ago(self, sent: float) -> float:
        """Seconds since a call now back was sent, for the limiter: 0 (count it from now) when it
        left before this provider's first answer, when its send time is not to be trusted."""
        now = time.perf_counter()
        if self._warm_since is None:
            self._warm_since = now
        return now - sent if sent >= self._warm_since else 0.0

    def worst_case_cost(self, request: WorkerRequest) -> float:
        return worst_case_cost(request, self.price)

    async def _on_retry(self, error: ProviderError, delay: float) -> None:
        self.observer.retried(self.name, error)
        if error.kind == "rate_limited" and self.limiter is not None:
            await _maybe_await(self.limiter.cool_down(delay))

    async def aclose(self) -> None:
        await self.provider.aclose()
