"""What the rollout phase of an iteration could take at best under the workers' rate limits: the
critical path *under the limits*, for benchmarks/paper_scale.py.

The iteration's rollouts are replayed as calls: each step of each rollout is a call to its worker
that took the latency it took (the answer's own time, retries left out), starts once the steps
it reads have finished, and counts against its worker's limits as providers count it: requests
no closer than `window_s / rpm` apart (OpenAI and Anthropic enforce a per-minute limit over
shorter periods, "60 RPM as 1 request per second", so a burst is refused even under the minute's
count), and tokens reserved at the send, prompt / 4 + `max_tokens`, settled to the tokens used
when the call ends, each counting for `window_s` from its send.

- `lower_bound_s`: a bound no schedule can beat: the slowest rollout's own chain, and per worker
  its calls taking the earliest slots its RPM allows, the calls with the longest chains after
  them first.
- `reference_schedule_s`: a schedule a perfect orchestrator could run: every call sent the moment
  it is ready and its limits allow, the call with the longest chain still after it first, with no
  overhead and no safety margin. The faults the providers drew are in it: a worker's `refused`
  attempts each take a send slot, spread evenly over its sends, and `cooldowns` of them (429s)
  stop its sends for `cooldown_s`, their Retry-After. List scheduling is not proven optimal, so
  this is a yardstick, not a bound; wall time over it is what our scheduling and overhead cost.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    worker: str
    latency_s: float
    reads: list[int]  # indices of the calls of the same rollout it waits for
    reserve_tokens: int = 0
    used_tokens: int = 0
    tail_s: float = 0.0  # its latency plus the longest chain of calls that wait for it


@dataclass
class Limits:
    rpm: int | None
    tpm: int | None
    window_s: float = 60.0
    refused: int = 0  # attempts the provider refused (drawn 429s and 500s)
    cooldowns: int = 0  # of them, 429s with a Retry-After of `cooldown_s`
    cooldown_s: float = 0.0


def calls_of(rollouts: Sequence[Any], max_tokens: dict[str, int]) -> list[list[Call]]:
    """Each rollout's steps as `Call`s (a step that made no call takes no time); `max_tokens` per worker."""
    from conductor_rl.workers.limits import estimate_tokens

    plans = []
    for r in rollouts:
        steps = r.workflow.steps if r.workflow is not None else []
        plans.append(
            [
                Call(
                    s.worker,
                    s.latency_s if s.started_s is not None else 0.0,
                    [j for j in s.access if 0 <= j < i],
                    estimate_tokens(s.messages, max_tokens.get(s.worker, 0)) if s.started_s is not None else 0,
                    s.usage.input_tokens + s.usage.output_tokens,
                )
                for i, s in enumerate(steps)
            ]
        )
    for plan in plans:
        _set_tails(plan)
    return plans


def _set_tails(plan: list[Call]) -> None:
    for i in reversed(range(len(plan))):
        after = [plan[j].tail_s for j in range(i + 1, len(plan)) if i in plan[j].reads]
        plan[i].tail_s = plan[i].latency_s + max(after, default=0.0)


def chain_s(plans: Sequence[Sequence[Call]]) -> float:
    """The slowest rollout's own chain, with no limits."""
    return max((c.tail_s for plan in plans for c in plan if not c.reads), default=0.0)


def lower_bound_s(plans: Sequence[Sequence[Call]], limits: dict[str, Limits]) -> float:
    bound = chain_s(plans)
    for worker, limit in limits.items():
        if not limit.rpm:
            continue
        calls = [c for plan in plans for c in plan if c.worker == worker and c.latency_s > 0]
        tails = sorted((c.tail_s for c in calls), reverse=True)
        for j, tail in enumerate(tails):
            bound = max(bound, j * limit.window_s / limit.rpm + tail)
    return bound


@dataclass
class _Worker:
    limits: Limits
    ready: list[tuple[float, int, int, int]] = field(default_factory=list)  # (-tail, order, rollout, step)
    last_send: float = -math.inf
    blocked_until: float = -math.inf  # a 429's Retry-After
    tokens: deque = field(default_factory=deque)  # [send time, tokens] in the window
    sends: int = 0
    faults: dict[int, bool] = field(default_factory=dict)  # send index -> refused with a cooldown (a 429)?

    def plan_faults(self, calls: int) -> None:
        """Spread the refused attempts evenly over the sends, the 429s evenly among them."""
        refused, total = self.limits.refused, calls + self.limits.refused
        for i in range(refused):
            is_429 = (i + 1) * self.limits.cooldowns // refused > i * self.limits.cooldowns // refused
            self.faults[round((i + 1) * total / (refused + 1))] = is_429

    def room_at(self, now: float, reserve: int) -> float:
        """The earliest time from `now` a call reserving `reserve` tokens fits (inf: never by expiry alone)."""
        w = self.limits.window_s
        while self.tokens and self.tokens[0][0] + w <= now:
            self.tokens.popleft()
        at = max(now, self.blocked_until)
        if self.limits.rpm:
            at = max(at, self.last_send + w / self.limits.rpm)
        if self.limits.tpm:
            excess = sum(t for _, t in self.tokens) + min(reserve, self.limits.tpm) - self.limits.tpm
            for sent, t in self.tokens:
                if excess <= 0:
                    break
                excess -= t
                at = max(at, sent + w)
        return at


def reference_schedule_s(plans: Sequence[Sequence[Call]], limits: dict[str, Limits]) -> float:
    """The makespan of the list schedule described in the module's docstring."""
    workers = {name: _Worker(limit) for name, limit in limits.items()}
    for name, worker in workers.items():
        worker.plan_faults(sum(1 for plan in plans for c in plan if c.worker == name and c.latency_s > 0))
    waiting = [[len(c.reads) for c in plan] for plan in plans]
    events: list[tuple[float, int, int, int, list | None]] = []  # (time, kind 0=end, rollout, step, token entry)
    order = 0
    now = makespan = 0.0

    def release(r: int, i: int) -> None:
        nonlocal order
        call = plans[r][i]
        if call.latency_s <= 0:  # no call made: done at once
            heapq.heappush(events, (now, 0, r, i, None))
            return
        worker = workers.setdefault(call.worker, _Worker(Limits(None, None)))
        heapq.heappush(worker.ready, (-call.tail_s, order, r, i))
        order += 1

    for r, plan in enumerate(plans):
        for i, call in enumerate(plan):
            if not call.reads:
                release(r, i)
    while True:
        wake = math.inf
        for worker in workers.values():
            while worker.ready:
                _, _, r, i = worker.ready[0]
                call = plans[r][i]
                at = worker.room_at(now, call.reserve_tokens)
                if at > now:
                    wake = min(wake, at)
                    break
                worker.last_send, worker.sends = now, worker.sends + 1
                if worker.sends in worker.faults:  # refused: the slot is spent, the call waits for the next
                    if worker.faults[worker.sends]:
                        worker.blocked_until = now + worker.limits.cooldown_s
                    continue
                heapq.heappop(worker.ready)
                entry = [now, call.reserve_tokens]
                worker.tokens.append(entry)
                heapq.heappush(events, (now + call.latency_s, 0, r, i, entry))
        if events and events[0][0] <= wake:
            now, _, r, i, entry = heapq.heappop(events)
            if entry is not None:
                entry[1] = plans[r][i].used_tokens  # settled to what it used
            makespan = max(makespan, now)
            for j in range(i + 1, len(plans[r])):
                if i in plans[r][j].reads:
                    waiting[r][j] -= 1
                    if waiting[r][j] == 0:
                        release(r, j)
        elif wake < math.inf:
            now = wake
        else:
            return makespan
