"""An on-disk cache of worker responses, for cheap, reproducible evaluation and
debugging (off in training, where fresh samples are the point).

The key is a digest of what determines a response: provider, model, endpoint,
the worker's extra request body, messages, sampling and reasoning parameters (and,
for simulated workers, the task hint). Fields added later (the reasoning level,
extra_body) enter the key only when set, so entries made before them stay valid.
An entry keeps the answer, the reasoning text apart from it and the finish reason.
API keys are never part of a request, so they never reach the cache. A hit is
returned with cost 0 (no money was spent) and its original token usage.

One small file per entry, written through `write_atomically` (temporary file,
fsync, rename, fsync of the folder): a crash never leaves a half-written entry,
an entry that `put` returned from survives a power loss, and adding an entry
costs the same however large the cache is. An unreadable entry counts as a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from conductor_rl.atomic_files import fsync_dir, write_atomically
from conductor_rl.workers.providers.base import Provider, Usage, WorkerRequest, WorkerResponse


class ResponseCache:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    def key(self, identity: dict[str, object], request: WorkerRequest) -> str:
        fields = {
            **identity,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "reasoning_budget": request.reasoning_budget,
            "hint": dataclasses.asdict(request.hint) if request.hint is not None else None,
        }
        if request.reasoning != "default":
            fields["reasoning"] = request.reasoning
        return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str) -> WorkerResponse | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            response = WorkerResponse(
                text=data["text"],
                usage=Usage(**data["usage"]),
                latency_s=0.0,
                cost_usd=0.0,
                simulated=bool(data["simulated"]),
                reasoning=str(data.get("reasoning", "")),
                finish_reason=str(data.get("finish_reason", "")),
            )
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return response

    def put(self, key: str, response: WorkerResponse) -> None:
        path = self._path(key)
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.folder)  # the new shard folder's own entry must survive too
        record = {
            "text": response.text,
            "usage": dataclasses.asdict(response.usage),
            "simulated": response.simulated,
            "cost_usd_when_made": response.cost_usd,
            "reasoning": response.reasoning,
            "finish_reason": response.finish_reason,
        }
        write_atomically(path, lambda out: json.dump(record, out, ensure_ascii=False))

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"


class CachedProvider:
    """A provider that answers from the cache when it can, and fills it otherwise."""

    def __init__(self, provider: Provider, cache: ResponseCache, identity: dict[str, object]) -> None:
        self.provider, self.cache, self.identity = provider, cache, identity
        self.name = provider.name
        self.simulated = provider.simulated

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        key = self.cache.key(self.identity, request)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        response = await self.provider.complete(request)
        self.cache.put(key, response)
        return response

    async def aclose(self) -> None:
        await self.provider.aclose()
