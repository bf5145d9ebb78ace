"""A local HTTP server on 127.0.0.1 that speaks the four wire formats our
providers use, so tests and benchmarks drive the real SDKs over real HTTP:

    POST /v1/chat/completions                       OpenAI Chat Completions (and vLLM & co.)
    POST /v1/responses                              OpenAI Responses
    POST /v1/messages                               Anthropic Messages
    POST /v1beta/models/{model}:generateContent     Google GenAI

Every answer carries usage in the format's own field names; the usage of each
answer is kept (`stats.usages`) so tests can check costs against it.

Behaviour: a fixed `latency_s`; an enforced limit of `rpm` requests per
`window_s` seconds (a sliding window over accepted requests; the excess gets a
429 with Retry-After and is counted in `stats.limit_429s`); and scripted faults
for the next requests (`script([...])`): "429" or "429:SECONDS" (with
Retry-After), "500", "400", "401", "slow:SECONDS", "drop" (the connection is
closed without an answer), "malformed" (a 200 whose JSON is broken), "ok".

It is a small HTTP/1.1 server on asyncio streams (keep-alive, Content-Length
bodies): small enough to make faults exact, such as a connection dropped
mid-request. It runs its own event loop in a thread, so synchronous tests and
Ray actors in other processes can all reach it.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

CACHED_TOKENS = 2
REASONING_TOKENS = 3
ANSWER_TOKENS = 5

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^:/]+):generateContent$")


@dataclass
class ServerStats:
    requests: int = 0
    ok: int = 0
    limit_429s: int = 0                 # 429s the server's own limit had to return
    limit_429_times: list[float] = field(default_factory=list)  # seconds since the first request
    scripted_faults: int = 0
    usages: list[dict[str, int]] = field(default_factory=list)  # one per 200 answer: input/output/reasoning/cached
    auth_headers: list[str] = field(default_factory=list)
    first_request_at: float | None = None


class FakeLLMServer:
    def __init__(self, latency_s: float = 0.0, rpm: int | None = None, window_s: float = 60.0) -> None:
        self.latency_s = latency_s
        self.rpm = rpm
        self.window_s = window_s
        self.stats = ServerStats()
        self._faults: collections.deque[str] = collections.deque()
        self._accepted: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- life cycle ---------------------------------------------------------------
    def start(self) -> "FakeLLMServer":
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
        async def close() -> None:
            self._server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:  # open keep-alive connections
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop = None

    def __enter__(self) -> "FakeLLMServer":
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
                headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
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
            stats.auth_headers.append(headers.get("authorization", "") or headers.get("x-api-key", "")
                                      or headers.get("x-goog-api-key", ""))
            fault = self._faults.popleft() if self._faults else "ok"
            if fault != "ok":
                stats.scripted_faults += 1
            wire = _wire_of(path)
            limited_wait = self._over_limit(now) if fault == "ok" else None
            if limited_wait is not None:
                stats.limit_429s += 1
                stats.limit_429_times.append(now - stats.first_request_at)
        if wire is None or method != "POST":
            return _http(404, {"error": {"message": f"no route {method} {path}"}})
        if limited_wait is not None:
            return _error(wire, 429, "rate limit reached for requests per minute", retry_after=limited_wait)
        if fault.startswith("429"):
            _, _, wait = fault.partition(":")
            return _error(wire, 429, "rate limited (scripted)", retry_after=float(wait) if wait else None)
        if fault in ("500", "400", "401"):
            return _error(wire, int(fault), f"scripted {fault}: the request was refused")
        if fault == "drop":
            return None
        await asyncio.sleep(float(fault.partition(":")[2]) if fault.startswith("slow") else self.latency_s)
        if fault == "malformed":
            return _http(200, None, raw=b'{"id": "x", "choices": [{"message": ')
        request = json.loads(body or b"{}")
        usage = _usage_for(request)
        with self._lock:
            if stats is self.stats:
                stats.ok += 1
                stats.usages.append(usage)
        return _http(200, _answer(wire, path, request, usage))

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


def _wire_of(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    if _GEMINI_PATH.match(path):
        return "gemini"
    return None


def _prompt_text(request: dict[str, Any]) -> str:
    parts: list[str] = [str(request.get("instructions") or ""), json.dumps(request.get("system") or "")]
    for m in request.get("messages") or request.get("input") or []:
        parts.append(str(m.get("content", "")))
    for c in request.get("contents") or []:
        parts.extend(str(p.get("text", "")) for p in c.get("parts", []))
    return " ".join(parts)


def _usage_for(request: dict[str, Any]) -> dict[str, int]:
    """Deterministic usage: about 4 characters per prompt token."""
    return {"input": 10 + len(_prompt_text(request)) // 4, "output": ANSWER_TOKENS + REASONING_TOKENS,
            "reasoning": REASONING_TOKENS, "cached": CACHED_TOKENS}


def _answer(wire: str, path: str, request: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    text = "echo: " + _prompt_text(request).strip()[-60:]
    model = request.get("model") or (_GEMINI_PATH.match(path).group(1) if wire == "gemini" else "fake")
    if wire == "chat":
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": usage["input"], "completion_tokens": usage["output"],
                          "total_tokens": usage["input"] + usage["output"],
                          "prompt_tokens_details": {"cached_tokens": usage["cached"]},
                          "completion_tokens_details": {"reasoning_tokens": usage["reasoning"]}}}
    if wire == "responses":
        return {"id": "resp_1", "object": "response", "created_at": int(time.time()), "model": model,
                "status": "completed", "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
                "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": usage["input"], "output_tokens": usage["output"],
                          "total_tokens": usage["input"] + usage["output"],
                          "input_tokens_details": {"cached_tokens": usage["cached"]},
                          "output_tokens_details": {"reasoning_tokens": usage["reasoning"]}}}
    if wire == "anthropic":
        # Anthropic's input_tokens leaves out cache reads.
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": model, "stop_reason": "end_turn",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": usage["input"] - usage["cached"], "output_tokens": usage["output"],
                          "cache_read_input_tokens": usage["cached"], "cache_creation_input_tokens": 0,
                          "output_tokens_details": {"thinking_tokens": usage["reasoning"]}}}
    # Gemini's candidatesTokenCount leaves out the thoughts.
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "modelVersion": model,
            "usageMetadata": {"promptTokenCount": usage["input"], "candidatesTokenCount": usage["output"] - usage["reasoning"],
                              "thoughtsTokenCount": usage["reasoning"], "cachedContentTokenCount": usage["cached"],
                              "totalTokenCount": usage["input"] + usage["output"]}}


_STATUS_TEXT = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                429: "Too Many Requests", 500: "Internal Server Error"}
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}


def _error(wire: str, status: int, message: str, retry_after: float | None = None) -> bytes:
    if wire == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": "rate_limit_error" if status == 429 else "api_error",
                                                           "message": message}}
    elif wire == "gemini":
        body = {"error": {"code": status, "message": message, "status": _GOOGLE_STATUS.get(status, "UNKNOWN")}}
    else:
        body = {"error": {"message": message, "type": "requests" if status == 429 else "invalid_request_error",
                          "code": None}}
    extra = {"retry-after": f"{retry_after:.3f}"} if retry_after is not None else {}
    return _http(status, body, headers=extra)


def _http(status: int, body: Any, raw: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    payload = raw if raw is not None else json.dumps(body).encode()
    lines = [f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}", "content-type: application/json",
             f"content-length: {len(payload)}", "connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
