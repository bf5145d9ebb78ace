"""Turn each SDK's failures into `ProviderError`s our retry policy understands.

| what happened                         | kind                 | retryable |
|---------------------------------------|----------------------|-----------|
| 429                                   | `rate_limited`       | yes (honours Retry-After) |
| 408, 409                              | `timeout`, `conflict`| yes |
| 5xx (incl. Anthropic's 529 overload)  | `server_error`       | yes |
| 401, 403                              | `auth`               | no  |
| 404 (a retired model id, a wrong URL) | `bad_request`        | no (with that hint) |
| other 4xx                             | `bad_request`        | no (the provider's message is kept) |
| no answer in time                     | `timeout`            | yes |
| connection refused or dropped         | `connection`         | yes |
| a 2xx body that is not the JSON we expect | `malformed_response` | yes |

Messages carry the worker name and the provider's own words, never the key.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from typing import Any

from conductor_rl.workers.providers.base import ProviderError

MAX_MESSAGE_CHARS = 500


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from `retry-after-ms`, `retry-after` (seconds or an HTTP date)."""
    if not headers:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            if name == "retry-after":
                try:
                    parsed = email.utils.parsedate_to_datetime(value)
                except (TypeError, ValueError):
                    continue
                return max(parsed.timestamp() - time.time(), 0.0)
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def status_error(worker: str, status: int, message: str, retry_after_s: float | None = None) -> ProviderError:
    """The ProviderError for an HTTP error status."""
    text = f"worker {worker!r}: HTTP {status}: {_short(message)}"
    if status == 429:
        return ProviderError(text, kind="rate_limited", retryable=True, retry_after_s=retry_after_s)
    if status in (408, 409):
        return ProviderError(
            text, kind="timeout" if status == 408 else "conflict", retryable=True, retry_after_s=retry_after_s
        )
    if status >= 500:
        return ProviderError(text, kind="server_error", retryable=True, retry_after_s=retry_after_s)
    if status in (401, 403):
        return ProviderError(text + " (check the key in the worker's api_key_env variable)", kind="auth")
    if status == 404:
        text += " (a model id the provider does not serve, retired or misspelt, or a wrong base_url)"
    return ProviderError(text, kind="bad_request")


def timeout_error(worker: str, timeout_s: float) -> ProviderError:
    return ProviderError(f"worker {worker!r}: no response within {timeout_s:g}s", kind="timeout", retryable=True)


def connection_error(worker: str, err: BaseException) -> ProviderError:
    cause = err.__cause__ or err
    return ProviderError(
        f"worker {worker!r}: connection failed or dropped ({type(cause).__name__})", kind="connection", retryable=True
    )


def malformed_error(worker: str, err: BaseException | str) -> ProviderError:
    what = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return ProviderError(
        f"worker {worker!r}: malformed response ({_short(str(what))})", kind="malformed_response", retryable=True
    )


def map_stainless_error(worker: str, err: BaseException, sdk: Any, timeout_s: float) -> ProviderError | None:
    """The openai and anthropic SDKs share one error hierarchy (both are generated
    by Stainless): APIStatusError (status_code, response), APITimeoutError (a
    subclass of APIConnectionError), APIResponseValidationError. A 2xx body that
    is not JSON surfaces as json.JSONDecodeError from `response.json()`.
    Returns None for anything that is not a provider fault (a bug: let it raise)."""
    if isinstance(err, sdk.APIStatusError):
        return status_error(worker, err.status_code, _stainless_message(err), parse_retry_after(err.response.headers))
    if isinstance(err, sdk.APITimeoutError):
        return timeout_error(worker, timeout_s)
    if isinstance(err, sdk.APIConnectionError):
        return connection_error(worker, err)
    if isinstance(err, (sdk.APIResponseValidationError, json.JSONDecodeError)):
        return malformed_error(worker, err)
    return None


def _stainless_message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(err, "message", err))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"
