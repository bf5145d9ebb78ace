"""Worker doubles: scripted providers for tests that need a worker to answer a particular way
(a fixed text, a numbered answer, a fault, a delay, a hang, a meeting point with other calls),
recording every request they were sent.

They implement the real `Provider` interface and answer with the real `WorkerRequest` and
`WorkerResponse` records, so a test cannot pass against a double that a real provider could not
be. A test that only needs a deterministic worker of some skill uses the real simulated provider
(`provider: sim`) instead; a test of the wire formats uses `fake_llm_server`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple

from conductor_rl.workers.providers.base import Provider, Usage, WorkerRequest, WorkerResponse

#: Writes a call's answer from its request and its number in the worker's log (see `CallLog`).
Answer = Callable[[WorkerRequest, int], str]


class Call(NamedTuple):
    number: int  # its place in the log it was written to
    worker: str
    request: WorkerRequest

    @property
    def user_text(self) -> str:
        return "\n".join(m["content"] for m in self.request.messages if m["role"] == "user")


class CallLog:
    """The calls workers received, in arrival order, and the order calls started and ended in
    (`events`: ("start", n) and ("end", n)). A worker has a log of its own unless it is given one;
    workers that share a log number their calls across the pool."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: list[tuple[str, int]] = []

    def start(self, worker: str, request: WorkerRequest) -> int:
        number = len(self.calls)
        self.calls.append(Call(number, worker, request))
        self.events.append(("start", number))
        return number

    def end(self, number: int) -> None:
        self.events.append(("end", number))


class Gate:
    """Opens once `n` calls are waiting at it. Calls that only get through together prove they
    were in flight at the same time, however slow the machine; had they run one after another, the
    first would wait until `timeout_s` (for ever when None: a step timeout ends it).
    `arrived` counts every call through it, `most` the most in flight at once."""

    def __init__(self, n: int, timeout_s: float | None = None) -> None:
        self.n, self.timeout_s = n, timeout_s
        self.arrived = self.in_flight = self.most = 0
        self._open = asyncio.Event()

    @asynccontextmanager
    async def through(self) -> AsyncIterator[None]:
        """Wait at the gate, then count as in flight until the block ends."""
        self.arrived += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.arrived >= self.n:
                self._open.set()
            await asyncio.wait_for(self._open.wait(), self.timeout_s)
            yield
        finally:
            self.in_flight -= 1


class ScriptedWorker:
    """A worker that answers `ANSWER(<name>#<n>)`, or `text`, or what `answer` writes, with the
    given usage, cost, reasoning and finish reason; after `yields` turns of the event loop, its
    `gate`, and `delay_s` seconds. It hangs for ever (`hang`) or raises (`raises`) when told.
    Every request is kept in `requests` and in its `log`."""

    def __init__(
        self,
        name: str = "worker",
        *,
        text: str | None = None,
        answer: Answer | None = None,
        usage: Usage = Usage(),
        cost_usd: float = 0.0,
        reasoning: str = "",
        finish_reason: str = "",
        simulated: bool = False,
        delay_s: float = 0.0,
        yields: int = 0,
        raises: BaseException | None = None,
        hang: bool = False,
        gate: Gate | None = None,
        log: CallLog | None = None,
    ) -> None:
        assert text is None or answer is None, "a fixed text or an answer rule, not both"
        self.name, self.simulated = name, simulated
        self.text, self.answer = text, answer
        self.usage, self.cost_usd, self.reasoning, self.finish_reason = usage, cost_usd, reasoning, finish_reason
        self.delay_s, self.yields, self.raises, self.hang, self.gate = delay_s, yields, raises, hang, gate
        self.log = log if log is not None else CallLog()
        self.requests: list[WorkerRequest] = []

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        self.requests.append(request)
        n = self.log.start(self.name, request)
        try:
            if self.hang:
                await asyncio.Event().wait()
            if self.gate is None:
                return await self._respond(request, n)
            async with self.gate.through():
                return await self._respond(request, n)
        finally:
            self.log.end(n)

    async def _respond(self, request: WorkerRequest, n: int) -> WorkerResponse:
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.raises is not None:
            raise self.raises
        if self.answer is not None:
            text = self.answer(request, n)
        else:
            text = self.text if self.text is not None else f"ANSWER({self.name}#{n})"
        return WorkerResponse(
            text=text,
            usage=self.usage,
            latency_s=self.delay_s,
            cost_usd=self.cost_usd,
            simulated=self.simulated,
            reasoning=self.reasoning,
            finish_reason=self.finish_reason,
        )

    async def aclose(self) -> None:
        return None


class GatedProvider:
    """A real provider whose calls meet at `gate` before it answers them."""

    def __init__(self, provider: Provider, gate: Gate) -> None:
        self.provider, self.gate = provider, gate
        self.name, self.simulated = provider.name, provider.simulated

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        async with self.gate.through():
            return await self.provider.complete(request)

    async def aclose(self) -> None:
        await self.provider.aclose()
