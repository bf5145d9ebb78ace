"""The four wire formats the fake provider server speaks (conductor_rl/testing/fake_llm_server.py):
which wire a path is, and each wire's answer, usage and error bodies, with deterministic usage
(about 4 characters a prompt token) so tests can check costs exactly."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from conductor_rl.testing.api_rules import is_openai_name, thinking_config

CACHED_TOKENS = 2
REASONING_TOKENS = 3
ANSWER_TOKENS = 5
REASONING_TEXT = "Let me think step by step: the question asks for a sum."
OUTPUTS = ("think", "length", "length_empty")  # script entries that shape an answer; not faults

_GEMINI_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^:/]+):generateContent$")


def wire_of(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    if _GEMINI_PATH.match(path):
        return "gemini"
    return None


def gemini_model(path: str) -> str:
    """The model a Gemini path names (`wire_of` called it Gemini by this same pattern)."""
    match = _GEMINI_PATH.match(path)
    assert match is not None, path
    return match.group(1)


def prompt_text(request: dict[str, Any]) -> str:
    parts: list[str] = [str(request.get("instructions") or ""), json.dumps(request.get("system") or "")]
    for m in request.get("messages") or request.get("input") or []:
        parts.append(str(m.get("content", "")))
    for c in request.get("contents") or []:
        parts.extend(str(p.get("text", "")) for p in c.get("parts", []))
    return " ".join(parts)


@dataclass(frozen=True)
class Output:
    """What a scripted answer holds: reasoning or not (and in which form), cut short or not, an answer or not."""

    think: bool = False
    variant: str = ""  # reasoning_content | inline | open | redacted
    length: bool = False
    empty: bool = False

    @classmethod
    def of(cls, entry: str) -> Output:
        kind, _, variant = entry.partition(":")
        if kind == "think":
            return cls(think=True, variant=variant)
        if kind == "length":
            return cls(length=True)
        if kind == "length_empty":
            return cls(think=True, variant=variant, length=True, empty=True)
        return cls()


def output_cap(request: dict[str, Any]) -> int | None:
    """The output tokens a request allows, in whichever field its wire format names them."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        if isinstance(request.get(key), int):
            return request[key]
    config = request.get("generationConfig") or {}
    return config.get("maxOutputTokens") if isinstance(config.get("maxOutputTokens"), int) else None


def usage_for(request: dict[str, Any], output: Output = Output(), answer_tokens: int | None = None) -> dict[str, int]:
    """Usage: about 4 characters per prompt token; `answer_tokens` billed for the answer (None: a few;
    none when there is no answer)."""
    answer = 0 if output.empty else (ANSWER_TOKENS if answer_tokens is None else answer_tokens)
    cap = output_cap(request)
    if cap is not None:  # a provider never bills more than the request allowed
        answer = min(answer, max(cap - REASONING_TOKENS, 0))
    return {
        "input": 10 + len(prompt_text(request)) // 4,
        "output": answer + REASONING_TOKENS,
        "reasoning": REASONING_TOKENS,
        "cached": CACHED_TOKENS,
    }


def answer(
    wire: str, path: str, request: dict[str, Any], usage: dict[str, int], output: Output = Output()
) -> dict[str, Any]:
    text = "" if output.empty else "echo: " + prompt_text(request).strip()[-60:]
    model = request.get("model") or (gemini_model(path) if wire == "gemini" else "fake")
    if wire == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if output.think and output.variant == "inline":
            message["content"] = f"<think>{REASONING_TEXT}" + ("" if output.empty else f"</think>\n\n{text}")
        elif output.think and output.variant == "open":
            message["content"] = REASONING_TEXT + ("" if output.empty else f"\n</think>\n\n{text}")
        elif output.think and not is_openai_name(str(model).lower()):  # OpenAI's Chat shows no reasoning
            message["reasoning_content" if output.variant == "reasoning_content" else "reasoning"] = REASONING_TEXT
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "length" if output.length else "stop", "message": message}],
            "usage": {
                "prompt_tokens": usage["input"],
                "completion_tokens": usage["output"],
                "total_tokens": usage["input"] + usage["output"],
                "prompt_tokens_details": {"cached_tokens": usage["cached"]},
                "completion_tokens_details": {"reasoning_tokens": usage["reasoning"]},
            },
        }
    if wire == "responses":
        items: list[dict[str, Any]] = []
        if output.think:
            # Summaries only when asked for (reasoning.summary), as OpenAI does.
            asked = bool((request.get("reasoning") or {}).get("summary"))
            items.append(
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": REASONING_TEXT}] if asked else [],
                }
            )
        if text:
            items.append(
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "incomplete" if output.length else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if output.length else None,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "output": items,
            "usage": {
                "input_tokens": usage["input"],
                "output_tokens": usage["output"],
                "total_tokens": usage["input"] + usage["output"],
                "input_tokens_details": {"cached_tokens": usage["cached"]},
                "output_tokens_details": {"reasoning_tokens": usage["reasoning"]},
            },
        }
    if wire == "anthropic":
        blocks: list[dict[str, Any]] = []
        thinking_on = (request.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        if output.think and thinking_on:  # thinking blocks come only with thinking on
            blocks.append({"type": "thinking", "thinking": REASONING_TEXT, "signature": "c2lnbmF0dXJl"})
            if output.variant == "redacted":
                blocks.append({"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"})
        if text:
            blocks.append({"type": "text", "text": text})
        # Anthropic's input_tokens leaves out cache reads.
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "stop_reason": "max_tokens" if output.length else "end_turn",
            "content": blocks,
            "usage": {
                "input_tokens": usage["input"] - usage["cached"],
                "output_tokens": usage["output"],
                "cache_read_input_tokens": usage["cached"],
                "cache_creation_input_tokens": 0,
                "output_tokens_details": {"thinking_tokens": usage["reasoning"]},
            },
        }
    parts: list[dict[str, Any]] = []
    if output.think and thinking_config(request).get("includeThoughts"):  # thought summaries only when asked
        parts.append({"text": REASONING_TEXT, "thought": True})
    if text:
        parts.append({"text": text})
    content: dict[str, Any] = {"role": "model", **({"parts": parts} if parts else {})}
    # Gemini's candidatesTokenCount leaves out the thoughts.
    return {
        "candidates": [{"content": content, "finishReason": "MAX_TOKENS" if output.length else "STOP"}],
        "modelVersion": model,
        "usageMetadata": {
            "promptTokenCount": usage["input"],
            "candidatesTokenCount": usage["output"] - usage["reasoning"],
            "thoughtsTokenCount": usage["reasoning"],
            "cachedContentTokenCount": usage["cached"],
            "totalTokenCount": usage["input"] + usage["output"],
        },
    }


_STATUS_TEXT = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
}


def error(
    wire: str,
    status: int,
    message: str,
    retry_after: float | None = None,
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    if wire == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    elif wire == "gemini":
        body = {"error": {"code": status, "message": message, "status": _GOOGLE_STATUS.get(status, "UNKNOWN")}}
    else:
        body = {
            "error": {
                "message": message,
                "type": "requests" if status == 429 else "invalid_request_error",
                "param": param,
                "code": code,
            }
        }
    extra = {"retry-after": f"{retry_after:.3f}"} if retry_after is not None else {}
    return http(status, body, headers=extra)


def http(status: int, body: Any, raw: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    payload = raw if raw is not None else json.dumps(body).encode()
    lines = [
        f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}",
        "content-type: application/json",
        f"content-length: {len(payload)}",
        "connection: keep-alive",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
