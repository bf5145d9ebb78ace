"""A local HTTP server on 127.0.0.1 that speaks the four wire formats our
providers use, so tests and benchmarks drive the real SDKs over real HTTP:

    POST /v1/chat/completions                       OpenAI Chat Completions (and vLLM & co.)
    POST /v1/responses                              OpenAI Responses
    POST /v1/messages                               Anthropic Messages
    POST /v1beta/models/{model}:generateContent     Google GenAI

Every answer carries usage in the format's own field names; the usage of each
answer is kept (`stats.usages`), and every request's JSON body (`stats.bodies`,
with `stats.paths`), so tests can check costs and exactly what went over the wire.

Behaviour: a fixed `latency_s`, or `conditions` (conductor_rl/testing/conditions.py: a
latency and billed output tokens drawn per model, 429s and 500s at set rates, counted in `stats.drawn_faults`); an
enforced limit of `rpm` requests per `window_s` seconds (a sliding window over
accepted requests; the excess gets a 429 with Retry-After and is counted in
`stats.limit_429s`); and a script for the next requests (`script([...])`). Faults: "429" or "429:SECONDS" (with
Retry-After), "500", "400", "401", "slow:SECONDS", "drop" (the connection is
closed without an answer), "malformed" (a 200 whose JSON is broken). Answers
("ok" is the plain one; none of them counts as a fault):

    "think"         the answer comes with reasoning, as the wire carries it: Chat
                    `message.reasoning` (vLLM's reasoning parser; OpenAI's own models
                    show none in Chat Completions); Responses a
                    `reasoning` item (its summary only if the request asked for
                    one); Anthropic a `thinking` block (only if thinking was on);
                    Gemini a part with `thought: true` (only if includeThoughts)
    "think:reasoning_content"   Chat: the field's older vLLM name
    "think:inline"  Chat: `<think>reasoning</think>answer` in the content
    "think:open"    Chat: `reasoning</think>answer` (the template opened the tag: R1)
    "think:redacted"  Anthropic: a redacted_thinking block besides the thinking one
    "length"        the answer is cut short by the output limit (finish "length",
                    Responses "incomplete", Anthropic "max_tokens", Gemini MAX_TOKENS)
    "length_empty[:VARIANT]"  the whole limit went to reasoning: no answer at all,
                    the reasoning as "think[:VARIANT]" shows it (inline: an unclosed tag;
                    open: content with no tag at all)

Strict models: requests are checked as the real APIs check them, per model and API version:
the rules (conductor_rl/testing/api_rules.py) are kept apart from
conductor_rl/workers/request_shape.py, so that a mistake in that table shows as a refusal,
with the provider's status, error shape and, where we know them, its words
(`stats.refusals`). A model id the public APIs retired gets its provider's 404
(`serves_retired` turns that off).
Models the rules do not name (the tests' "fake-model") are accepted as they come.

It is a small HTTP/1.1 server on asyncio streams (keep-alive, Content-Length
bodies): small enough to make faults exact, such as a connection dropped
mid-request. It runs its own event loop in a thread, so synchronous tests and
Ray actors in other processes can all reach it.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from conductor_rl.testing.api_rules import refusal
from conductor_rl.testing.conditions import ProviderConditions
from conductor_rl.testing.wire_formats import OUTPUTS, Output, answer, error, gemini_model, http, usage_for, wire_of


@dataclass
class ServerStats:
    requests: int = 0
    ok: int = 0
    limit_429s: int = 0  # 429s the server's own limit had to return
    limit_429_times: list[float] = field(default_factory=list)  # seconds since the first request
    scripted_faults: int = 0
    drawn_faults: int = 0  # 429s and 500s that `conditions` drew
    drawn_429s: int = 0  # of them, the 429s
    usages: list[dict[str, int]] = field(default_factory=list)  # one per 200 answer: input/output/reasoning/cached
    auth_headers: list[str] = field(default_factory=list)
    first_request_at: float | None = None
    bodies: list[Any] = field(default_factory=list)  # every request's JSON body, as received
    paths: list[str] = field(default_factory=list)  # and its path (Gemini names the model there)
    refusals: list[str] = field(default_factory=list)  # the messages of strict-model 400s


class FakeLLMServer:
    def __init__(
        self,
        latency_s: float = 0.0,
        rpm: int | None = None,
        window_s: float = 60.0,
        conditions: ProviderConditions | None = None,
    ) -> None:
        self.latency_s = latency_s
        # Drawn latency per model and random 429s / 500s (conductor_rl/testing/conditions.py); None: latency_s.
        self.conditions = conditions
        self.rpm = rpm
        self.window_s = window_s
        self.stats = ServerStats()
        # False: model ids the public APIs retired get their 404 (api_rules.RETIRED_MODELS); true: served,
        # for tests of such a model's parameter rules (Vertex AI and Bedrock retire on their own dates).
        self.serves_retired = False
        self._faults: collections.deque[str] = collections.deque()
        self._accepted: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- life cycle ---------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fake-llm-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        server, thread = self._server, self._thread
        assert server is not None and thread is not None, "a started server has both"

        async def close() -> None:
            server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # open keep-alive connections
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        thread.join(5)
        self._loop = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """Anthropic and Google SDKs add their own version prefix."""
        return f"http://127.0.0.1:{self.port}"

    def base_url_for(self, provider: str) -> str:
        return self.openai_url if provider.startswith("openai") else self.root_url

    def script(self, faults: list[str]) -> None:
        with self._lock:
            self._faults.extend(faults)

    def reset(self, latency_s: float | None = None, rpm: int | None = None, window_s: float | None = None) -> None:
        with self._lock:
            self.stats = ServerStats()
            self.serves_retired = False
            self._faults.clear()
            self._accepted.clear()
            if latency_s is not None:
                self.latency_s = latency_s
            self.rpm = rpm
            if window_s is not None:
                self.window_s = window_s

    # -- HTTP ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                fields = (line.partition(":") for line in lines[1:] if line)
                headers = {k.strip().lower(): v.strip() for k, _, v in fields}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                reply = await self._respond(method, path.split("?")[0], headers, body)
                if reply is None:  # "drop": close without an answer
                    writer.transport.abort()
                    return
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # stop(): quietly, or asyncio's stream callback prints the cancellation
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            stats = self.stats
            stats.requests += 1
            if stats.first_request_at is None:
                stats.first_request_at = now
            stats.auth_headers.append(
                headers.get("authorization", "") or headers.get("x-api-key", "") or headers.get("x-goog-api-key", "")
            )
            wire = wire_of(path)
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = None
            drawn = self._faults.popleft() if self._faults else None
            fault = drawn or (self.conditions.fault() if self.conditions else "ok")
            answers = fault == "ok" or fault.split(":")[0] in OUTPUTS
            if not answers:
                if drawn:
                    stats.scripted_faults += 1
                else:
                    stats.drawn_faults += 1
                    stats.drawn_429s += fault.startswith("429")
            latency, answer_tokens = self.latency_s, None
            if self.conditions is not None and wire is not None and isinstance(request, dict):
                model = gemini_model(path) if wire == "gemini" else str(request.get("model"))
                latency, answer_tokens = self.conditions.latency_of(model), self.conditions.output_tokens_of(model)
            stats.bodies.append(request)
            stats.paths.append(path)
            limited_wait = self._over_limit(now) if answers else None
            if limited_wait is not None:
                stats.limit_429s += 1
                stats.limit_429_times.append(now - stats.first_request_at)
        if wire is None or method != "POST":
            return http(404, {"error": {"message": f"no route {method} {path}"}})
        if limited_wait is not None:
            return error(wire, 429, "rate limit reached for requests per minute", retry_after=limited_wait)
        if fault.startswith("429"):
            _, _, wait = fault.partition(":")
            return error(wire, 429, "rate limited (scripted)", retry_after=float(wait) if wait else None)
        if fault in ("500", "400", "401"):
            return error(wire, int(fault), f"scripted {fault}: the request was refused")
        if fault == "drop":
            return None
        await asyncio.sleep(float(fault.partition(":")[2]) if fault.startswith("slow") else latency)
        if fault == "malformed":
            return http(200, None, raw=b'{"id": "x", "choices": [{"message": ')
        if not isinstance(request, dict):
            return error(wire, 400, "We could not parse the JSON body of your request.")
        model = gemini_model(path) if wire == "gemini" else str(request.get("model", ""))
        version = headers.get("anthropic-version", "")
        refused = refusal(wire, model, request, anthropic_version=version, retired=not self.serves_retired)
        if refused is not None:
            with self._lock:
                stats.refusals.append(refused.message)
            return error(wire, refused.status, refused.message, param=refused.param, code=refused.code)
        output = Output.of(fault if answers else "ok")
        usage = usage_for(request, output, answer_tokens)
        with self._lock:
            if stats is self.stats:
                stats.ok += 1
                stats.usages.append(usage)
        return http(200, answer(wire, path, request, usage, output))

    def _over_limit(self, now: float) -> float | None:
        """None if the request fits the window (and is counted), else the seconds until it would."""
        if self.rpm is None:
            return None
        while self._accepted and self._accepted[0] <= now - self.window_s:
            self._accepted.popleft()
        if len(self._accepted) >= self.rpm:
            return self._accepted[0] + self.window_s - now
        self._accepted.append(now)
        return None
