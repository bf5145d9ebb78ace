"""What every HTTP provider shares: the key, the timer, the cost, the error
mapping around one SDK call. Subclasses build the SDK client and implement
`_call` (request -> `Reply`: answer, usage, reasoning, finish reason) and
`_map_error` (SDK exception -> ProviderError, or None for a bug that should
raise as it is). What each request carries per model (temperature, reasoning
parameters, extra_body) comes from conductor_rl/workers/request_shape.py (what the
model accepts) and request_args.py (each SDK's arguments).

SDK retries are always off: our retry policy (conductor_rl/workers/retry.py) sees every
attempt, so that the cluster-wide rate limiter counts each one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest, WorkerResponse
from conductor_rl.workers.providers.errors import malformed_error
from conductor_rl.workers.providers.keys import Secret, read_api_key
from conductor_rl.workers.request_shape import ShapeError


@dataclass(frozen=True)
class Reply:
    """What one SDK call gave: the answer alone, its usage, the reasoning text the provider
    returned apart from it, and why generation ended ("stop", "length", another provider word, or "")."""

    text: str
    usage: Usage
    reasoning: str = ""
    finish_reason: str = ""


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
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.config.model!r}, base_url={self.config.base_url!r})"
        )

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        started = time.perf_counter()
        try:
            reply = await self._call(request)
        except ProviderError:
            raise
        except ShapeError as err:
            # What the model's API would refuse is refused here, without spending a call.
            raise ProviderError(f"worker {self.name!r}: {err}", kind="bad_request") from None
        except (KeyError, IndexError, AttributeError) as err:
            # The SDK parsed a body that lacks what a completion must have (no choices, no usage).
            raise malformed_error(self.name, err) from None
        except Exception as err:
            mapped = self._map_error(err)
            if mapped is None:
                raise
            raise mapped from None  # `from None`: the SDK's chain may hold request headers
        return WorkerResponse(
            text=reply.text,
            usage=reply.usage,
            latency_s=time.perf_counter() - started,
            cost_usd=cost_of(reply.usage, self.config.price),
            reasoning=reply.reasoning,
            finish_reason=reply.finish_reason,
        )

    async def _call(self, request: WorkerRequest) -> Reply:
        raise NotImplementedError

    def _map_error(self, err: BaseException) -> ProviderError | None:
        raise NotImplementedError

    async def aclose(self) -> None:
        if self._sdk_client is not None and self._sdk_loop is asyncio.get_running_loop():
            await self._close_client(self._sdk_client)
        self._sdk_client = self._sdk_loop = None

    async def _close_client(self, client: Any) -> None:
        await client.close()


def count(value: int | None) -> int:
    return int(value or 0)
