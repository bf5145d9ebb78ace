"""The worker pool on Ray: shared rate limiters and ledger, worker replicas, and
a client that is a provider.

- `RateLimiterActor`: one per (key, model, base_url), a named actor that every
  replica on the cluster gets or creates, so N replicas share one RPM/TPM
  budget and see each other's cooldowns. Its name is a one-way digest, never
  the key.
- `LedgerActor`: the cluster's `CostLedger` (named; one per run).
- `WorkerActor`: an async actor serving one worker: the provider behind
  `GuardedProvider` (limiter, retries, ledger, metrics). Any number of replicas;
  `concurrency` calls in flight each; `num_cpus`/`resources` place it.
- `WorkerPool`: the client. It spreads calls over the replicas (fewest in
  flight first) and implements the provider interface, so `run_plan` takes it
  as a worker unchanged. Errors come back as the library's exceptions:
  `ProviderError` (also when a replica dies), `BudgetExceededError` among them.
  A served worker's pool gets its servers' URLs (`base_urls`): replica i
  calls server i % n, with at least one replica per server.
  A call whose replica dies or cannot be reached (its node was lost: Ray's own
  task retries run out before the node's death is known) goes to another
  replica; a replica seen failing is passed over for `SUSPECT_S` seconds, or
  until it answers again.

The ledger and the limiters live on the node of the process that creates them
(the driver's): they ask for no resources, and Ray would otherwise put them on
any node, a worker node that an autoscaler may take away with the run's costs.

The ledger's budget is fixed when it is created (`get_ledger(budget_usd=...)`);
pools of a ledger without one skip the per-call budget check.

The key is read in the driver (a missing one fails there, naming the variable)
and handed to the replicas as a `Secret`, so worker nodes need not hold it.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray
from ray import ObjectRef
from ray.actor import ActorHandle

from actors.metrics import RayMetricsObserver
from conductor_rl.config import WorkerConfig
from conductor_rl.workers.guarded import GuardedProvider
from conductor_rl.workers.ledger import CostLedger
from conductor_rl.workers.limits import AsyncRateLimiter, WindowLimits
from conductor_rl.workers.providers import (
    OFFLINE_PROVIDERS,
    CallKey,
    ProviderError,
    Secret,
    Usage,
    WorkerRequest,
    WorkerResponse,
    build_provider,
)
from conductor_rl.workers.providers.keys import read_api_key
from conductor_rl.workers.retry import RetryPolicy

NAMESPACE = "conductor-rl"
LEDGER_NAME = "ledger"
MAX_WAITERS = 100_000  # limiter and ledger calls are tiny; every in-flight call may be waiting on one
SUSPECT_S = 30.0  # a replica seen failing gets no new calls for this long (Ray restarts it meanwhile)


def on_this_node() -> dict[str, Any]:
    """Ray options that keep an actor on the caller's node (the driver's, for the ledger and limiters)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}


@ray.remote(num_cpus=0)
class RateLimiterActor:
    def __init__(self, rpm: int | None, tpm: int | None, window_s: float, headroom_s: float, pace: bool) -> None:
        self._limiter = AsyncRateLimiter(WindowLimits(rpm, tpm, window_s, headroom_s, pace=pace))

    async def acquire(self, tokens: int, since: float | None = None) -> tuple[int, float]:
        return await self._limiter.acquire(tokens, since)

    async def settle(self, grant_id: int, actual_tokens: int | None, sent_ago_s: float) -> None:
        self._limiter.settle(grant_id, actual_tokens, sent_ago_s)

    async def cool_down(self, seconds: float) -> None:
        self._limiter.cool_down(seconds)

    async def stats(self) -> dict[str, float]:
        calls, tokens = self._limiter.limits.in_window()
        return {"calls_in_window": calls, "tokens_in_window": tokens, "waited_s": self._limiter.waited_s}


@ray.remote(num_cpus=0)
class LedgerActor:
    """The run's `CostLedger`; with `journal`, it continues that spend journal (its one writer) and
    answers a call's open or outcome only once it is on disk."""

    def __init__(self, budget_usd: float | None, journal: str | None = None, job: str = "") -> None:
        self._ledger = CostLedger.from_journal(journal, budget_usd, job=job) if journal else CostLedger(budget_usd)

    async def _durable(self, fsync: bool = True, before_a_call: bool = False) -> None:
        await self._ledger.durable(fsync, before_a_call)

    async def admit(self) -> None:
        self._ledger.admit()

    async def record_calls(self, calls: list[tuple[str, str, Usage, float, str | None, str]]) -> bool:
        exhausted = False
        for worker, provider, usage, cost_usd, call_id, model in calls:
            exhausted = self._ledger.record(worker, provider, usage, cost_usd, call_id=call_id, model=model)
        await self._durable()
        return exhausted

    async def open_call(
        self,
        call_id: str,
        worker: str,
        provider: str,
        max_cost_usd: float,
        admit: bool = True,
        model: str = "",
        key: CallKey | None = None,
    ) -> None:
        self._ledger.open_call(call_id, worker, provider, max_cost_usd, admit, model, key)
        await self._durable(fsync=False, before_a_call=True)  # written before the call is sent; fsync'd soon

    async def open_calls(self, calls: list[tuple[str, str, str, float, str, CallKey | None]]) -> None:
        for call_id, worker, provider, max_cost_usd, model, key in calls:
            self._ledger.open_call(call_id, worker, provider, max_cost_usd, False, model, key)
        await self._durable(fsync=False, before_a_call=True)

    async def close_call(self, call_id: str, outcome: str = "error") -> None:
        self._ledger.close_call(call_id, outcome)
        await self._durable()

    async def lose_call(self, call_id: str, why: str) -> None:
        self._ledger.lose_call(call_id, why)
        await self._durable()

    async def settle_open_calls(self) -> int:
        settled = self._ledger.settle_open_calls()
        await self._durable()
        return settled

    async def start_iteration(self, iteration: int) -> None:
        self._ledger.start_iteration(iteration)

    async def tag_request(self, request_id: str, client: str) -> None:
        self._ledger.tag_request(request_id, client)
        await self._durable(fsync=False, before_a_call=True)

    async def start_cell(self, cell: str | None) -> None:
        self._ledger.start_cell(cell)

    async def budget(self) -> float | None:
        return self._ledger.budget_usd

    async def journaled(self) -> bool:
        return self._ledger.journal is not None

    async def summary(self) -> dict:
        return self._ledger.summary()

    async def restore(self, summary: dict) -> None:
        self._ledger.restore(summary)

    async def exhausted(self) -> bool:
        return self._ledger.exhausted

    async def stop_reason(self) -> str | None:
        return self._ledger.stop_reason

    async def entries(self) -> list:
        return list(self._ledger.entries)


def limiter_name(config: WorkerConfig, key: Secret, scope: str = "") -> str:
    digest = hashlib.sha256(f"{key.fingerprint()}|{config.model}|{config.base_url}|{scope}".encode()).hexdigest()[:16]
    return f"limiter-{digest}"


def get_rate_limiter(
    config: WorkerConfig,
    key: Secret,
    window_s: float = 60.0,
    headroom_s: float | None = None,
    scope: str = "",
    pace: bool = True,
):
    """The cluster's limiter for this key and model (and `scope`: runs that must not
    share limits, such as benchmarks); the first caller's limits win. It lives as
    long as some pool holds it."""
    # Headroom for the jitter between a grant and its arrival at the provider (actor
    # hops, network, a busy node): 2 % of the window, and never under 0.25 s.
    headroom = max(0.02 * window_s, 0.25) if headroom_s is None else headroom_s
    for _ in range(3):
        limiter = RateLimiterActor.options(
            name=limiter_name(config, key, scope),
            namespace=NAMESPACE,
            get_if_exists=True,
            max_concurrency=MAX_WAITERS,
            **on_this_node(),
        ).remote(config.rpm, config.tpm, window_s, headroom, pace)
        try:
            ray.get(limiter.__ray_ready__.remote())
            return limiter
        except ray.exceptions.RayActorError:
            continue  # the name still pointed at a limiter whose last pool just went away
    raise RuntimeError(f"worker {config.name!r}: could not start its rate limiter actor; is the Ray cluster healthy?")


def get_ledger(
    budget_usd: float | None = None, name: str = LEDGER_NAME, journal: str | None = None, job: str = ""
) -> ActorHandle:
    """The run's ledger (created with `budget_usd` by its first caller). `journal`: the spend journal
    it continues (a path on this node, the driver's), as a session of `job`."""
    return LedgerActor.options(
        name=name, namespace=NAMESPACE, get_if_exists=True, max_concurrency=MAX_WAITERS, **on_this_node()
    ).remote(budget_usd, journal, job)


class _Remote:
    """Calls an actor's methods as awaitables (GuardedProvider awaits whatever it gets)."""

    def __init__(self, handle: ActorHandle) -> None:
        self._handle = handle

    def __getattr__(self, method: str):
        return getattr(self._handle, method).remote


def actor_name(handle: ActorHandle) -> str:
    """The name a named actor was created with (WorkerActors look their limiter and ledger up by it)."""
    name = ray.get(handle.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_actor_name()))
    if not name:
        raise ValueError(
            "worker pools share their rate limiter and ledger by name: pass a named actor "
            "(get_rate_limiter, get_ledger)"
        )
    return name


class _Batch:
    """Calls made in one event-loop turn leave as one message (`send(items)`); with `answered`, each
    caller gets a future of the batch's answer to await, its own, so that a caller cancelled while it
    waits (its request timed out) cancels nothing the others wait for. One message each would queue
    the hundreds of calls that start, or end, together behind one another."""

    def __init__(self, send: Callable[[list], Awaitable], answered: bool) -> None:
        self._send, self._answered = send, answered
        self._items: list = []
        self._waiters: list[asyncio.Future] = []
        self._relays: set[asyncio.Task] = set()

    def add(self, item: Any) -> asyncio.Future | None:
        loop = asyncio.get_running_loop()
        if not self._items:
            loop.call_soon(self._flush)
        self._items.append(item)
        if not self._answered:
            return None
        waiter = loop.create_future()
        self._waiters.append(waiter)
        return waiter

    def _flush(self) -> None:
        items, self._items = self._items, []
        waiters, self._waiters = self._waiters, []
        sent = self._send(items)
        if waiters:
            relay = asyncio.ensure_future(_relay(sent, waiters))
            self._relays.add(relay)
            relay.add_done_callback(self._relays.discard)


class _LedgerClient(_Remote):
    """The ledger actor as GuardedProvider calls it. Opens that need no admission (no budget to
    check) and outcomes leave in batches. With `confirm` (the ledger writes a spend journal) each
    such open is awaited all the same, so that no call is sent before its open is written."""

    def __init__(self, handle: ActorHandle, confirm: bool = False) -> None:
        super().__init__(handle)
        self._opens = _Batch(handle.open_calls.remote, answered=confirm)
        self._records = _Batch(handle.record_calls.remote, answered=True)

    def open_call(
        self,
        call_id: str,
        worker: str,
        provider: str,
        max_cost_usd: float,
        admit: bool = True,
        model: str = "",
        key: CallKey | None = None,
    ) -> ObjectRef | asyncio.Future | None:
        if admit:  # an admission has an answer of its own (it may refuse)
            return self._handle.open_call.remote(call_id, worker, provider, max_cost_usd, admit, model, key)
        return self._opens.add((call_id, worker, provider, max_cost_usd, model, key))

    def record(
        self, worker: str, provider: str, usage: Usage, cost_usd: float, call_id: str | None = None, model: str = ""
    ) -> asyncio.Future | None:
        return self._records.add((worker, provider, usage, cost_usd, call_id, model))


async def _relay(sent: Awaitable, waiters: list[asyncio.Future]) -> None:
    try:
        answer = await sent
    except Exception as err:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(err)
    else:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(answer)


@ray.remote
class WorkerActor:
    def __init__(
        self,
        config: WorkerConfig,
        api_key: Secret | None,
        limiter_name: str | None,
        ledger_name: str | None,
        policy: RetryPolicy,
        seed: int = 0,
        check_budget: bool = True,
        journaled: bool = False,
    ) -> None:
        # Names, not handles: Ray cannot restart an actor whose constructor took actor handles
        # (they live in the object store), and replicas must be restartable.
        limiter = ray.get_actor(limiter_name, namespace=NAMESPACE) if limiter_name else None
        ledger = ray.get_actor(ledger_name, namespace=NAMESPACE) if ledger_name else None
        provider = build_provider(config, seed=seed, api_key=api_key)
        self._worker = GuardedProvider(
            provider,
            provider_kind=config.provider,
            limiter=_Remote(limiter) if limiter is not None else None,
            ledger=_LedgerClient(ledger, confirm=journaled) if ledger is not None else None,
            policy=policy,
            observer=RayMetricsObserver(),
            check_budget=check_budget,
            price=config.price,
            model=config.model,
            journaled=journaled,
        )

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        return await self._worker.complete(request)

    async def aclose(self) -> None:
        await self._worker.aclose()


class WorkerPool:
    """`replicas` WorkerActors serving one worker, behind the provider interface."""

    simulated = False

    def __init__(
        self,
        config: WorkerConfig,
        replicas: int = 1,
        *,
        ledger: ActorHandle | None = None,
        seed: int = 0,
        window_s: float = 60.0,
        headroom_s: float | None = None,
        pace: bool = True,
        num_cpus: float = 0.25,
        resources: dict[str, float] | None = None,
        policy: RetryPolicy | None = None,
        limiter_scope: str = "",
        base_urls: Sequence[str] | None = None,
        api_key: Secret | None = None,
    ) -> None:
        """`base_urls`: the servers of a served worker (actors/served_worker.py), one per replica, and
        `api_key` the key they require (in place of the configured worker's).
        WorkerActor i calls server i % len(base_urls), and there are at least as many
        WorkerActors as servers, so the pool's concurrency grows with the servers."""
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {replicas}")
        if base_urls is not None and not base_urls:
            raise ValueError(f"worker {config.name!r}: base_urls is empty; a served worker needs its servers' URLs")
        if base_urls:
            replicas = max(replicas, len(base_urls))
        self.name = config.name
        self.config = config
        self.simulated = config.provider == "sim"
        key = api_key or (
            read_api_key(config) if config.provider not in OFFLINE_PROVIDERS else None
        )  # fails here, naming the variable
        limited = config.rpm is not None or config.tpm is not None
        self.limiter = (
            get_rate_limiter(config, key or Secret(config.name), window_s, headroom_s, limiter_scope, pace)
            if limited
            else None
        )
        self.ledger = ledger if ledger is not None else get_ledger()
        check_budget = ray.get(self.ledger.budget.remote()) is not None
        journaled = ray.get(self.ledger.journaled.remote())
        policy = policy or RetryPolicy(max_retries=config.max_retries)
        # A crashed replica is restarted by Ray, and the calls it was serving (or that reached it while it
        # restarted) are sent to it again; past these limits a call fails as `replica_died`.
        options = {
            "max_concurrency": config.concurrency,
            "num_cpus": num_cpus,
            "max_restarts": 3,
            "max_task_retries": 3,
        }
        if resources:
            options["resources"] = resources
        limiter_name = actor_name(self.limiter) if self.limiter is not None else None
        ledger_name = actor_name(self.ledger)
        # The limiter above is keyed by the configured worker, so every server of a served worker shares it.
        self.base_urls = [base_urls[i % len(base_urls)] if base_urls else config.base_url for i in range(replicas)]
        self.replicas = [
            WorkerActor.options(**options).remote(
                config.model_copy(update={"base_url": base_urls[i % len(base_urls)]}) if base_urls else config,
                key,
                limiter_name,
                ledger_name,
                policy,
                seed,
                check_budget,
                journaled,
            )
            for i in range(replicas)
        ]
        self._in_flight = [0] * replicas
        self._failed_at = [float("-inf")] * replicas  # monotonic time a replica was last seen failing
        self._turn = itertools.count()

    def __repr__(self) -> str:
        return f"WorkerPool(name={self.name!r}, provider={self.config.provider!r}, replicas={len(self.replicas)})"

    def _pick(self, exclude: frozenset[int] = frozenset()) -> int | None:
        """The replica with the fewest calls in flight, ties round-robin; one seen failing in the last
        `SUSPECT_S` seconds only when no other is left. None when every replica is in `exclude`."""
        start = next(self._turn) % len(self.replicas)
        order = [(start + i) % len(self.replicas) for i in range(len(self.replicas))]
        candidates = [i for i in order if i not in exclude]
        if not candidates:
            return None
        now = time.monotonic()
        return min(candidates, key=lambda i: (now - self._failed_at[i] < SUSPECT_S, self._in_flight[i]))

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        """One call on a replica; where the replica dies or cannot be reached, on the next one, until each
        has been tried once. A lost attempt's cost stays open in the ledger (settled at its worst case)."""
        tried: set[int] = set()
        i = self._pick()
        while i is not None:
            tried.add(i)
            self._in_flight[i] += 1
            call = self.replicas[i].complete.remote(request)
            try:
                response = await call
                self._failed_at[i] = float("-inf")
                return response
            except asyncio.CancelledError:  # the caller gave up (a timeout, a client gone): so does the replica
                ray.cancel(call)  # its provider call is closed and settled there, at its bill or worst case
                raise
            except ray.exceptions.RayTaskError as err:
                cause = err.cause
                if isinstance(cause, ProviderError):  # BudgetExceededError included
                    raise cause from None
                raise ProviderError(
                    f"worker {self.name!r}: replica failed: {type(cause).__name__}: {cause}", kind="worker_exception"
                ) from None
            except ray.exceptions.RayActorError as err:
                self._failed_at[i] = time.monotonic()
                lost = f"replica {i} died ({type(err).__name__})"
            finally:
                self._in_flight[i] -= 1
            i = self._pick(exclude=frozenset(tried))
        raise ProviderError(
            f"worker {self.name!r}: {lost}, and no other replica could take the call; it can be retried",
            kind="replica_died",
            retryable=True,
        )

    async def aclose(self) -> None:
        for replica in self.replicas:
            ray.kill(replica)
