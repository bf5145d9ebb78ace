"""Rate limits (sliding window, tokens, cooldowns) and the retry policy, on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest

from conductor_rl.workers.limits import AsyncRateLimiter, WindowLimits, estimate_tokens
from conductor_rl.workers.providers import ProviderError
from conductor_rl.workers.retry import RetryPolicy, call_with_retries


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rpm_lets_a_burst_through_then_waits_for_the_oldest_grant():
    clock = Clock()
    limits = WindowLimits(rpm=3, tpm=None, window_s=10.0, headroom_s=0.5, clock=clock, pace=False)
    for _ in range(3):
        assert limits.wait_for() == 0
        limits.settle(limits.take())  # an instant call: settled when granted
        clock.now += 1
    assert limits.wait_for() == pytest.approx(7.5)  # first grant at 100, expires at 110.5; now 103
    clock.now = 110.5
    assert limits.wait_for() == 0


def test_a_call_counts_until_a_window_after_its_answer():
    """Its request reached the provider somewhere between grant and answer."""
    clock = Clock()
    limits = WindowLimits(rpm=1, tpm=None, window_s=10.0, clock=clock, pace=False, max_call_s=300.0)
    grant = limits.take()
    clock.now += 50  # in flight for longer than a window: still counts
    assert limits.wait_for() > 10
    limits.settle(grant, sent_ago_s=20.0)  # answered at 150, sent at 130 (a slow hop)
    assert limits.wait_for() == 0  # 130 + 10 < 150
    grant = limits.take()
    clock.now += 5.0
    limits.settle(grant, sent_ago_s=1.0)  # sent at 154
    assert limits.wait_for() == pytest.approx(9.0)
    clock.now = 200.0
    limits.take()  # never settled (its process died)
    assert limits.wait_for() == pytest.approx(310.0)
    limits.settle(999)  # unknown ids are ignored


def test_no_window_ever_holds_more_than_rpm_grants():
    clock, rng = Clock(), random.Random(1)
    limits = WindowLimits(rpm=5, tpm=None, window_s=2.0, clock=clock)
    grants = []
    for _ in range(200):
        clock.now += rng.uniform(0, 0.3)
        wait = limits.wait_for()
        clock.now += wait
        assert limits.wait_for() == 0
        grant = limits.take()
        grants.append(clock.now)
        latency = rng.uniform(0, 0.2)
        clock.now += latency
        limits.settle(grant, sent_ago_s=latency)
    for t in grants:
        assert sum(1 for g in grants if t <= g < t + 2.0) <= 5
    # and it keeps up: 200 grants at 5 per 2 s take about 80 s
    assert grants[-1] - grants[0] < 82


def test_tpm_reserves_an_estimate_and_settles_to_real_usage():
    clock = Clock()
    limits = WindowLimits(rpm=None, tpm=1000, window_s=60.0, clock=clock)
    first = limits.take(600)
    limits.settle(first)  # answered at once, usage not yet known: the estimate stays
    assert limits.wait_for(600) == pytest.approx(60.0)
    limits.settle(first, 100)  # it used far less than reserved
    assert limits.wait_for(600) == 0
    assert limits.in_window() == (1, 100)
    assert estimate_tokens([{"role": "user", "content": "x" * 400}], 50) == 150


def test_cooldown_holds_everyone_and_only_grows():
    clock = Clock()
    limits = WindowLimits(rpm=100, tpm=None, window_s=60.0, clock=clock, pace=False)
    limits.cool_down(5.0)
    limits.cool_down(1.0)
    assert limits.wait_for() == pytest.approx(5.0)
    clock.now += 5.0
    assert limits.wait_for() == 0


def test_async_limiter_grants_in_order_and_honours_a_cooldown_set_while_waiting():
    async def go():
        limiter = AsyncRateLimiter(WindowLimits(rpm=2, tpm=None, window_s=0.3, pace=False))
        order, granted_at = [], {}

        async def one(i):
            grant, _ = await limiter.acquire()
            granted_at[i] = loop.time()
            limiter.settle(grant)
            order.append(i)

        loop = asyncio.get_running_loop()
        tasks = [asyncio.create_task(one(i)) for i in range(5)]
        while len(order) < 2:  # the first two fit the window at once; the others wait
            await asyncio.sleep(0)
        cooled_at = loop.time()
        limiter.cool_down(0.5)
        await asyncio.gather(*tasks)
        return order, granted_at, cooled_at

    order, granted_at, cooled_at = asyncio.run(go())
    assert order == [0, 1, 2, 3, 4]
    # Lower bounds only, which a busy machine cannot break: whoever waited was held past the cooldown,
    # and the fifth waited one more window after the third and fourth.
    waited = [i for i in range(5) if granted_at[i] > cooled_at]
    assert 4 in waited and all(granted_at[i] >= cooled_at + 0.5 for i in waited), (granted_at, cooled_at)
    assert granted_at[4] >= granted_at[2] + 0.3


def test_a_retried_call_keeps_its_place_ahead_of_calls_asked_for_later():
    async def go():
        limiter = AsyncRateLimiter(WindowLimits(rpm=1, tpm=None, window_s=0.2, pace=False))
        first, _ = await limiter.acquire(since=100.0)
        order = []

        async def one(name, since):
            grant, _ = await limiter.acquire(since=since)
            limiter.settle(grant)
            order.append(name)

        later = [asyncio.create_task(one(f"new {i}", 200.0 + i)) for i in range(3)]
        await asyncio.sleep(0.05)  # they wait for the window; then the retry of a call asked at 150 arrives
        retry = asyncio.create_task(one("retry", 150.0))
        await asyncio.sleep(0)
        limiter.settle(first)
        await asyncio.gather(*later, retry)
        return order

    assert asyncio.run(go()) == ["retry", "new 0", "new 1", "new 2"]


def test_a_waiter_of_an_event_loop_that_ended_is_dropped_not_granted():
    limiter = AsyncRateLimiter(WindowLimits(rpm=1, tpm=None, window_s=0.2, pace=False))

    async def abandoned():
        grant, _ = await limiter.acquire()
        limiter.settle(grant)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(limiter.acquire(), 0.01)  # the loop ends with it waiting

    asyncio.run(abandoned())
    started = time.monotonic()
    asyncio.run(limiter.acquire())  # a new loop: granted once the window passes, nothing stale in the way
    assert time.monotonic() - started < 1.0


def test_pacing_spreads_grants_evenly():
    clock = Clock()
    limits = WindowLimits(rpm=4, tpm=None, window_s=2.0, clock=clock)
    starts = []
    for _ in range(8):
        clock.now += limits.wait_for()
        limits.settle(limits.take())
        starts.append(clock.now - 100.0)
    assert starts == pytest.approx([0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    # A waiter woken late keeps the schedule (no drift); an idle spell restarts it.
    clock.now += 0.5 + 0.1
    limits.settle(limits.take())
    assert limits.wait_for() == pytest.approx(0.4)
    clock.now += 10.0
    limits.settle(limits.take())
    assert limits.wait_for() == pytest.approx(0.5)


def test_a_late_schedule_catches_up_by_at_most_a_sixtieth_of_the_window():
    clock = Clock()
    limits = WindowLimits(rpm=600, tpm=None, window_s=60.0, clock=clock)  # a slot each 0.1 s, 10 a second
    limits.settle(limits.take())
    clock.now += 0.55  # woken 0.45 s late: the 4 slots missed go out at once, then the pace resumes
    for _ in range(5):
        assert limits.wait_for() == 0
        limits.settle(limits.take())
    assert limits.wait_for() == pytest.approx(0.05)
    clock.now += 5.0  # far behind (an idle spell): no burst of 50, the schedule restarts from now
    limits.settle(limits.take())
    assert limits.wait_for() == pytest.approx(0.1)


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="window_s"):
        WindowLimits(1, None, window_s=0)


def _flaky(errors):
    calls = []

    async def attempt():
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "done"

    return attempt, calls


def run_retries(errors, policy=RetryPolicy(max_retries=3, base_delay_s=1.0, max_delay_s=4.0)):
    slept, retried = [], []
    attempt, calls = _flaky(list(errors))

    async def sleep(s):
        slept.append(s)

    async def go():
        return await call_with_retries(
            attempt, policy, on_retry=lambda e, d: retried.append((e.kind, d)), rng=random.Random(0), sleep=sleep
        )

    return asyncio.run(go()), calls, slept, retried


def test_429_waits_its_retry_after_and_5xx_backs_off_with_full_jitter():
    errors = [
        ProviderError("429", kind="rate_limited", retryable=True, retry_after_s=2.5),
        ProviderError("500", kind="server_error", retryable=True),
        ProviderError("drop", kind="connection", retryable=True),
    ]
    result, calls, slept, retried = run_retries(errors)
    assert result == "done" and len(calls) == 4
    assert slept[0] == 2.5
    assert 0 <= slept[1] <= 2.0 and 0 <= slept[2] <= 4.0  # uniform(0, base * 2**n)
    assert [k for k, _ in retried] == ["rate_limited", "server_error", "connection"]


def test_other_4xx_fail_at_once_and_retries_run_out():
    bad = ProviderError("HTTP 400: prompt too long", kind="bad_request")
    with pytest.raises(ProviderError, match="prompt too long") as caught:
        run_retries([bad])
    assert caught.value is bad
    many = [ProviderError("500", kind="server_error", retryable=True) for _ in range(10)]
    with pytest.raises(ProviderError, match=r"after 4 attempts") as caught:
        run_retries(many)
    assert caught.value.kind == "server_error"


def test_full_jitter_stays_under_the_cap():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0)
    rng = random.Random(2)
    err = ProviderError("x", kind="server_error", retryable=True)
    delays = [policy.delay(n, err, rng) for n in range(20) for _ in range(20)]
    assert max(delays) <= 3.0 and min(delays) >= 0
    assert policy.delay(0, ProviderError("x", retryable=True, retry_after_s=500.0), rng) == 120.0
