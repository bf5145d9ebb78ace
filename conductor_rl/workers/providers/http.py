"""What every HTTP provider shares: the key, the timer, the cost, the error
mapping around one SDK call. Subclasses build the SDK client and implement
`_call` (request -> text and usage) and `_map_error` (SDK exception ->
ProviderError, or None for a bug that should raise as it is).

SDK retries are always off: our retry policy (conductor_rl/workers/retry.py) sees every
attempt, so that the cluster-wide rate limiter counts each one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest, WorkerResponse
from conductor_rl.workers.providers.errors import malformed_error
from conductor_rl.workers.providers.keys import Secret, read_api_key


class HttpProvider:
    simulated = False

    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        self.name = config.name
        self.config = config
        self._key = api_key if api_key is not None else read_api_key(config)
        self._sdk_client: Any = None
        self._sdk_loop: asyncio.AbstractEventLoop | None = None

    @property
    def _client(self) -> Any:
        """The SDK client of the running event loop. SDK clients pool connections that
        belong to one loop; `ask` runs one loop per question with the same providers."""
        loop = asyncio.get_running_loop()
        if self._sdk_client is None or self._sdk_loop is not loop:
            self._sdk_client, self._sdk_loop = self._make_client(), loop
        return self._sdk_client

    def _make_client(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.config.model!r}, base_url={self.config.base_url!r})"

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        started = time.perf_counter()
        try:
            text, usage = await self._call(request)
        except ProviderError:
            raise
        except (KeyError, IndexError, AttributeError) as err:
            # The SDK parsed a body that lacks what a completion must have (no choices, no usage).
            raise malformed_error(self.name, err) from None
        except Exception as err:
            mapped = self._map_error(err)
            if mapped is None:
                raise
            raise mapped from None  # `from None`: the SDK's chain may hold request headers
        return WorkerResponse(
            text=text, usage=usage, latency_s=time.perf_counter() - started,
            cost_usd=cost_of(usage, self.config.price),
        )

    async def _call(self, request: WorkerRequest) -> tuple[str, Usage]:
        raise NotImplementedError

    def _map_error(self, err: BaseException) -> ProviderError | None:
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._sdk_client is not None and self._sdk_loop is asyncio.get_running_loop():
            await self._close_client(self._sdk_client)
        self._sdk_client = self._sdk_loop = None

    async def _close_client(self, client: Any) -> None:
        await client.close()


def split_system(messages: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
    """System messages joined into one instruction (Anthropic and Gemini take it apart)."""
    system = [m["content"] for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    return ("\n\n".join(system) if system else None), rest


def effort_for_budget(budget: int | None) -> str | None:
    """OpenAI takes a reasoning *effort*, not a token budget: the nearest level.
    None keeps the model's default; 0 asks for the least reasoning."""
    if budget is None:
        return None
    if budget == 0:
        return "minimal"
    if budget <= 2048:
        return "low"
    if budget <= 8192:
        return "medium"
    return "high"


def count(value: int | None) -> int:
    return int(value or 0)
