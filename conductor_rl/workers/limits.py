"""Requests-per-minute and tokens-per-minute limits, and cooldowns.

`WindowLimits` is a sliding-window log: a call is let through when, counting
it, no window of `window_s` seconds holds more than `rpm` calls or `tpm`
tokens. A sliding window never lets through more than a provider's fixed or
sliding window allows.
`headroom_s` keeps each grant in the log a little longer than the window, so
jitter between our grant and the provider's arrival time (network, actor hops)
cannot make two windows overlap at the provider.

With `pace` (the default) grants are also spaced at least `window_s / rpm`
apart. A burst of a whole window's grants at once reaches the server spread
out (new connections, busy event loops), while the grants one window later
arrive at once, so the provider can see two windows' worth in one of its own
and return 429s (benchmarks/worker_pool.py runs 4 replicas against a limited
server). Evenly spaced grants arrive evenly; the cost is that the first window
ramps up instead of bursting. Providers enforce a minute's limit over shorter periods ("60,000 RPM
as 1,000 per second"), so grants that fell behind their schedule (a busy event loop woke the
waiter late) may catch up by up to a sixtieth of the window's calls at once; later than that, the
schedule restarts from now.

Tokens are reserved before the call (an estimate: prompt characters / 4 plus
`max_tokens`, which is also how OpenAI counts a request against its TPM) and
settled to the real usage afterwards. A call stays in the window until a window
after its answer (see `WindowLimits`).

`AsyncRateLimiter` serves waiters in the order their calls were first asked for
(`since`, a wall-clock time the caller keeps across its retries), so a retried
call keeps its place instead of queueing behind everything asked since; among
equals, first come, first served. One granter at a time sleeps until the first
waiter's grant, so a 429's cooldown, set meanwhile, delays whoever is next.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

CHARS_PER_TOKEN = 4


def estimate_tokens(messages: list[dict[str, str]], max_tokens: int) -> int:
    """Tokens to reserve for a request before its real usage is known."""
    return sum(len(m.get("content", "")) for m in messages) // CHARS_PER_TOKEN + max_tokens


@dataclass
class Grant:
    id: int
    at: float  # when it was granted; when settled, when it was settled
    tokens: int
    settled: bool = False


class WindowLimits:
    """Plain, synchronous bookkeeping (no sleeping): `wait_for(tokens)` says how
    long until a call of `tokens` fits; `take(tokens)` records it; `settle`
    closes it.

    A call counts in the window from its grant until `span_s` after the moment
    its request was *sent* (`settle(..., sent_ago_s=)`: the caller measures it),
    not after it was granted: time spent between the grant and the send (an
    actor hop, a busy event loop) would otherwise let the provider's window see
    more than ours. Stamping at the answer instead would be safer still but
    costs a latency per window in throughput. A call in flight counts until it
    settles; one never settled (its process died) is dropped after `max_call_s`."""

    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        window_s: float = 60.0,
        headroom_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        pace: bool = True,
        max_call_s: float = 900.0,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.rpm, self.tpm, self.window_s, self.headroom_s = rpm, tpm, window_s, headroom_s
        self.interval_s = window_s / rpm if (pace and rpm) else 0.0
        self.catch_up = max(1, (rpm or 0) // 60)  # slots a late schedule may make up at once
        self.max_call_s = max_call_s
        self.clock = clock
        self._grants: dict[int, Grant] = {}  # insertion order = grant order
        self._next_slot = float("-inf")
        self._ids = itertools.count(1)
        self.cooldown_until = 0.0

    @property
    def span_s(self) -> float:
        return self.window_s + self.headroom_s

    def _expires_at(self, grant: Grant) -> float:
        return grant.at + self.span_s + (0.0 if grant.settled else self.max_call_s)

    def _expire(self, now: float) -> None:
        for gone in [g.id for g in self._grants.values() if self._expires_at(g) <= now]:
            del self._grants[gone]

    def wait_for(self, tokens: int = 0) -> float:
        """Seconds until a call reserving `tokens` may start (0: now)."""
        now = self.clock()
        self._expire(now)
        wait = max(self.cooldown_until - now, 0.0)
        if self.interval_s:
            wait = max(wait, self._next_slot - now)
        by_expiry = sorted(self._grants.values(), key=self._expires_at)
        if self.rpm is not None and len(by_expiry) >= self.rpm:
            wait = max(wait, self._expires_at(by_expiry[len(by_expiry) - self.rpm]) - now)
        if self.tpm is not None and tokens > 0:
            tokens = min(tokens, self.tpm)  # a call larger than the whole budget waits for an empty window
            excess = sum(g.tokens for g in by_expiry) + tokens - self.tpm
            for grant in by_expiry:
                if excess <= 0:
                    break
                excess -= grant.tokens
                wait = max(wait, self._expires_at(grant) - now)
        return wait

    def take(self, tokens: int = 0) -> int:
        """Record a call starting now; returns its id for `settle`."""
        grant = Grant(next(self._ids), self.clock(), tokens)
        # Slots follow a schedule, so a waiter woken a little late does not push every
        # later slot back (on a busy node that drift would lower the rate); after an
        # idle spell the schedule restarts from now.
        late = grant.at - self._next_slot
        keep = late < self.catch_up * self.interval_s
        self._next_slot = (self._next_slot if keep else grant.at) + self.interval_s
        self._grants[grant.id] = grant
        return grant.id

    def settle(self, grant_id: int, actual_tokens: int | None = None, sent_ago_s: float = 0.0) -> None:
        """The call is over (answered or failed); its request was sent `sent_ago_s`
        seconds ago. It counts until `span_s` after that, with the tokens it really
        used (None: keep the estimate)."""
        grant = self._grants.get(grant_id)
        if grant is not None:
            grant.at, grant.settled = max(grant.at, self.clock() - max(sent_ago_s, 0.0)), True
            if actual_tokens is not None:
                grant.tokens = actual_tokens

    def cool_down(self, seconds: float) -> None:
        """No call starts for `seconds` (a 429's Retry-After); a longer cooldown already set stays."""
        self.cooldown_until = max(self.cooldown_until, self.clock() + seconds)

    def in_window(self) -> tuple[int, int]:
        self._expire(self.clock())
        return len(self._grants), sum(g.tokens for g in self._grants.values())


class AsyncRateLimiter:
    """`WindowLimits` with waiting: `await acquire(tokens)` returns once the call may start."""

    def __init__(self, limits: WindowLimits) -> None:
        self.limits = limits
        self._waiting: list[tuple[float, int, int, asyncio.Future]] = []  # (since, order, tokens, future): a heap
        self._order = itertools.count()
        self._granter: asyncio.Task | None = None
        self._arrived: asyncio.Event | None = None
        self.waited_s = 0.0

    async def acquire(self, tokens: int = 0, since: float | None = None) -> tuple[int, float]:
        """Returns (grant id, seconds waited). `since`: when the call was first asked for (time.time();
        None: now); earlier calls are granted first."""
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        heapq.heappush(self._waiting, (time.time() if since is None else since, next(self._order), tokens, future))
        self._wake(loop)
        grant = await future  # a cancelled waiter's future is skipped by the granter
        waited = time.monotonic() - started
        self.waited_s += waited
        return grant, waited

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._granter is None or self._granter.done() or self._granter.get_loop() is not loop:
            # Waiters of an event loop that has ended (one asyncio.run per round) can never be granted.
            self._waiting = [w for w in self._waiting if w[3].get_loop() is loop and not w[3].done()]
            heapq.heapify(self._waiting)
            self._arrived = asyncio.Event()
            self._granter = loop.create_task(self._grant())
        assert self._arrived is not None
        self._arrived.set()  # a waiter that may come first: the granter looks again

    async def _grant(self) -> None:
        assert self._arrived is not None
        arrived = self._arrived
        while self._waiting:
            _, _, tokens, future = self._waiting[0]
            if future.done():  # cancelled while waiting
                heapq.heappop(self._waiting)
                continue
            wait = self.limits.wait_for(tokens)
            if wait > 0:
                arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), wait)
                continue
            heapq.heappop(self._waiting)
            future.set_result(self.limits.take(tokens))

    def settle(self, grant_id: int, actual_tokens: int | None = None, sent_ago_s: float = 0.0) -> None:
        self.limits.settle(grant_id, actual_tokens, sent_ago_s)
        granter, arrived = self._granter, self._arrived
        if granter is not None and arrived is not None and not granter.done():
            granter.get_loop().call_soon_threadsafe(arrived.set)  # a call now expires sooner: look again

    def cool_down(self, seconds: float) -> None:
        self.limits.cool_down(seconds)
