"""The OpenAI chat-completions wire format of a served Conductor: a request
checked and turned into a question, an `Answer` turned into a completion or
into server-sent-event chunks, and errors in OpenAI's shape.

Decisions where the OpenAI API has no counterpart:
- The last user message is the question. Earlier turns (and system or
  developer messages) reach the Conductor as context written before it, one
  "role: text" line each (`question_text`): the Conductor plans one question,
  and its workers read that text in their subtasks as the plan quotes it.
- Fields a Conductor has no use for (top_p, max_tokens, stop, ...) are
  accepted and ignored, as OpenAI-compatible servers do; `n` other than 1,
  tools and a response format are refused, since one plan answers in text.
- Extensions in the body (the OpenAI client's `extra_body`): `workers` (the
  subset of the pool to offer), `max_steps` and `max_depth`, each within the
  server's limits; `temperature` and `seed` are the Conductor's sampling.
- The reply's `conductor` field carries the plan, every step (worker, subtask,
  latency, tokens, cost) and the total cost; `usage` sums the Conductor's and
  every worker's tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

IGNORED_FIELDS = frozenset(
    {
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "top_p",
        "user",
        "metadata",
        "store",
        "service_tier",
        "parallel_tool_calls",
        "reasoning_effort",
        "modalities",
        "prediction",
        "audio",
        "web_search_options",
    }
)
EXTENSION_FIELDS = frozenset({"workers", "max_steps", "max_depth"})
KNOWN_FIELDS = (
    frozenset({"model", "messages", "stream", "stream_options", "temperature", "n", "seed"})
    | IGNORED_FIELDS
    | EXTENSION_FIELDS
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class RequestError(Exception):
    """A request the server refuses, with the HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """OpenAI's error object: {"error": {"message", "type", "param", "code"}}."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask for (serve.* settings)."""

    max_request_bytes: int = 256_000
    max_messages: int = 64
    max_steps: int = 5
    max_depth: int = 0
    seat: str | None = None  # the pool's `provider: conductor` worker: a request recurses through it


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat request."""

    question: str  # the last user message
    context: tuple[tuple[str, str], ...]  # (role, text) of every message before it
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    temperature: float | None = None  # the Conductor's; None: the server's
    workers: tuple[str, ...] | None = None  # the pool subset to offer; None: all
    max_steps: int | None = None
    max_depth: int | None = None
    seed: int | None = None  # the Conductor's sampling seed; None: a fresh one

    def question_text(self) -> str:
        """What the Conductor is asked: the context lines, then the question."""
        if not self.context:
            return self.question
        lines = "\n".join(f"{role}: {text}" for role, text in self.context)
        return f"Conversation so far:\n{lines}\n\nQuestion: {self.question}"


def too_large(size: int, limits: RequestLimits) -> RequestError:
    return RequestError(
        413,
        f"the request is {size} bytes; this server takes at most {limits.max_request_bytes}",
        code="request_too_large",
    )


def check_declared_size(content_length: str | None, limits: RequestLimits) -> None:
    """Refuse by its Content-Length a body over `limits` before a byte of it is read (413); a missing or
    false length is caught as the body is read (`read_body`)."""
    if (
        content_length is not None
        and content_length.strip().isdigit()
        and int(content_length) > limits.max_request_bytes
    ):
        raise too_large(int(content_length), limits)


async def read_body(chunks: AsyncIterator[bytes], limits: RequestLimits) -> bytes:
    """The body from its chunks, stopped (413) once it passes `limits`: never more than the limit and
    one chunk in memory, whatever the client sends."""
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limits.max_request_bytes:
            raise too_large(size, limits)
        parts.append(chunk)
    return b"".join(parts)


def parse_chat_request(raw: bytes, served_model: str, pool: Sequence[str], limits: RequestLimits) -> ChatRequest:
    """The request in `raw` (a JSON body), checked against the served model, the pool and `limits`."""
    if len(raw) > limits.max_request_bytes:
        raise too_large(len(raw), limits)
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(400, f"the body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object with `model` and `messages`")
    unknown = sorted(set(body) - KNOWN_FIELDS)
    if unknown:
        raise RequestError(
            400,
            f"unsupported field(s) {unknown}: a Conductor answers in text with one plan "
            f"(extensions: {sorted(EXTENSION_FIELDS)})",
            param=unknown[0],
        )
    model = body.get("model")
    if model != served_model:
        raise RequestError(
            404,
            f"the model {model!r} is not served here; GET /v1/models lists {served_model!r}",
            param="model",
            code="model_not_found",
        )
    if body.get("n", 1) != 1:
        raise RequestError(400, "n must be 1: the Conductor returns one answer", param="n")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "`messages` must be a non-empty list of {role, content} objects", param="messages")
    if len(messages) > limits.max_messages:
        raise RequestError(
            400, f"{len(messages)} messages; this server takes at most {limits.max_messages}", param="messages"
        )
    turns = [_turn(m, i) for i, m in enumerate(messages)]
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None or not turns[last_user][1].strip():
        raise RequestError(
            400,
            "no question: the last user message is the question, and there is none (or it is empty)",
            param="messages",
        )
    workers = _workers(body, pool)
    max_depth = _int(body, "max_depth", 0, limits.max_depth)
    if max_depth and limits.seat is None:
        # Recursion is the Conductor's choice, a step given to its seat (offered with every subset):
        # without a seat in the pool, no call could be made.
        raise RequestError(
            400,
            f"`max_depth` {max_depth} needs the Conductor's seat in the pool, and this server's pool has no "
            "`provider: conductor` worker: send max_depth 0",
            param="max_depth",
        )
    return ChatRequest(
        question=turns[last_user][1],
        context=tuple(turns[:last_user]),
        stream=_bool(body, "stream"),
        include_usage=_include_usage(body),
        temperature=_number(body, "temperature", 0.0, 2.0),
        workers=workers,
        max_steps=_int(body, "max_steps", 1, limits.max_steps),
        max_depth=max_depth,
        seed=_int(body, "seed", 0, 2**31 - 1),
    )


def _turn(message: Any, index: int) -> tuple[str, str]:
    param = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise RequestError(400, f"{param} must be an object with a role among {sorted(ROLES)}", param=param)
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text ones
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise RequestError(400, f"{param}.content: only text parts are supported", param=f"{param}.content")
        content = "\n".join(p["text"] for p in content)
    if content is None and message["role"] == "assistant":
        content = ""
    if not isinstance(content, str):
        raise RequestError(400, f"{param}.content must be a string or a list of text parts", param=f"{param}.content")
    return message["role"], content


def _bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(400, f"`{key}` must be true or false", param=key)
    return value


def _include_usage(body: dict) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise RequestError(
            400, '`stream_options` must be an object like {"include_usage": true}', param="stream_options"
        )
    return bool(options.get("include_usage", False))


def _number(body: dict, key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"`{key}` must be a number from {low:g} to {high:g}, got {value!r}", param=key)
    return float(value)


def _int(body: dict, key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(
            400, f"`{key}` must be a whole number from {low} to {high} (this server's limit), got {value!r}", param=key
        )
    return value


def _workers(body: dict, pool: Sequence[str]) -> tuple[str, ...] | None:
    value = body.get("workers")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(w, str) for w in value):
        raise RequestError(
            400, f"`workers` must be a non-empty list of worker names from {list(pool)}", param="workers"
        )
    unknown = [w for w in value if w not in pool]
    if unknown:
        raise RequestError(400, f"unknown worker(s) {unknown}; this pool has {list(pool)}", param="workers")
    if len(set(value)) != len(value):
        raise RequestError(400, "`workers` names a worker twice", param="workers")
    return tuple(value)


# ---------------------------------------------------------------- replies


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage_of(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    request_id: str,
    model: str,
    content: str,
    usage: dict[str, int],
    conductor: dict[str, Any],
    created: int | None = None,
) -> dict[str, Any]:
    """A chat.completion object, with the `conductor` extension field."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage,
        "conductor": conductor,
    }


def chunk(
    request_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    conductor: dict[str, Any] | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A chat.completion.chunk: a delta, or (usage given) the usage chunk, whose choices are empty.
    `conductor`: a progress event (the plan, a step that finished) in the extension field."""
    body: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model}
    if usage is not None:
        body.update(choices=[], usage=usage)
    else:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason, "logprobs": None}]
    if conductor is not None:
        body["conductor"] = conductor
    return body


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event; `data` "[DONE]" ends the stream, as OpenAI's does."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
