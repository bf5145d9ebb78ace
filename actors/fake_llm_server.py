"""The fake LLM server (conductor_rl/testing/fake_llm_server.py) in its own Ray
actor process, for tests and benchmarks of the worker pool.

In the test process the server's thread shares the GIL with the driver's
event loop; under load its arrival timestamps lag, enough to see overruns
that never happened. In its own process it times arrivals as a
real provider would.
"""

from __future__ import annotations

import ray

from conductor_rl.testing.conditions import ProviderConditions
from conductor_rl.testing.fake_llm_server import FakeLLMServer, ServerStats


@ray.remote(num_cpus=0)
class FakeLLMServerActor:
    def __init__(
        self,
        latency_s: float = 0.0,
        rpm: int | None = None,
        window_s: float = 60.0,
        conditions: ProviderConditions | None = None,
    ) -> None:
        self._server = FakeLLMServer(latency_s, rpm, window_s, conditions).start()

    def base_url_for(self, provider: str) -> str:
        return self._server.base_url_for(provider)

    def script(self, faults: list[str]) -> None:
        self._server.script(faults)

    def reset(self, latency_s: float | None = None, rpm: int | None = None, window_s: float | None = None) -> None:
        self._server.reset(latency_s, rpm, window_s)

    def stats(self) -> ServerStats:
        return self._server.stats

    def stop(self) -> None:
        self._server.stop()


class RemoteFakeLLMServer:
    """The same methods as FakeLLMServer (`stats` a property), served by the actor."""

    def __init__(self, actor_options: dict | None = None, **kwargs) -> None:
        """`actor_options`: Ray options of the server's actor (a multi-node test pins it to the head)."""
        self._actor = FakeLLMServerActor.options(**(actor_options or {})).remote(**kwargs)
        self._urls = {p: ray.get(self._actor.base_url_for.remote(p)) for p in ("openai", "anthropic")}

    def base_url_for(self, provider: str) -> str:
        return self._urls["openai" if provider.startswith("openai") else "anthropic"]

    @property
    def openai_url(self) -> str:
        return self._urls["openai"]

    def script(self, faults: list[str]) -> None:
        ray.get(self._actor.script.remote(list(faults)))

    def reset(self, latency_s: float | None = None, rpm: int | None = None, window_s: float | None = None) -> None:
        ray.get(self._actor.reset.remote(latency_s, rpm, window_s))

    @property
    def stats(self) -> ServerStats:
        return ray.get(self._actor.stats.remote())

    def stop(self) -> None:
        ray.get(self._actor.stop.remote())
        ray.kill(self._actor)
