"""The Conductor's place in its own pool (`provider: conductor`, paper §3.2)."""

from __future__ import annotations

from conductor_rl.workers.providers.base import ProviderError, WorkerRequest, WorkerResponse


class ConductorSeat:
    """A pool member that is the Conductor itself. The workflow engine turns a step given to
    it into a recursive call (conductor_rl/rollout/recursion.py); it is never called as a worker."""

    is_conductor = True
    simulated = False

    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        raise ProviderError(
            f"worker {self.name!r} is the Conductor itself: only a plan's step, run by the "
            f"workflow engine, can call it",
            kind="bad_request",
        )

    async def aclose(self) -> None:
        return None
