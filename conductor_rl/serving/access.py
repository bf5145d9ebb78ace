"""Who may ask a served Conductor, and how much: bearer tokens, per-client
limits on requests and dollars over a sliding window, and a per-client budget
per UTC day or in total.

Tokens come from the environment (`CONDUCTOR_RL_SERVE_TOKENS`: comma-separated
`client:token` pairs) or a file (one `client token` per line, # comments).
Only their SHA-256 digests are kept, compared in constant time, and no token
is ever logged: a client is known by its name.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conductor_rl.serving.chat_format import RequestError
from conductor_rl.workers.spend_journal import client_events

TOKENS_ENV = "CONDUCTOR_RL_SERVE_TOKENS"


class TokensError(ValueError):
    """The tokens could not be read; the message says where and how to write them."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class BearerTokens:
    """Client names by token."""

    def __init__(self, pairs: dict[str, str]) -> None:
        """`pairs`: client name -> token."""
        short = sorted(name for name, token in pairs.items() if len(token) < 16)
        if short:
            raise TokensError(
                f"the token(s) of {short} are shorter than 16 characters: use long random ones "
                f"(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        self._clients = [(_digest(token), name) for name, token in pairs.items()]

    @classmethod
    def load(cls, tokens_file: str | None, environ: Mapping[str, str] | None = None) -> BearerTokens:
        """From `tokens_file` when given, else from the environment variable."""
        environ = os.environ if environ is None else environ
        if tokens_file:
            path = Path(tokens_file).expanduser()
            try:
                lines = path.read_text().splitlines()
            except OSError as err:
                raise TokensError(f"serve.tokens_file: cannot read {path}: {err.strerror}") from None
            entries = [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            bad = [i + 1 for i, e in enumerate(entries) if len(e) != 2]
            if bad:
                raise TokensError(f"serve.tokens_file {path}: entries {bad} are not `client token`")
            pairs = dict(entries)
        else:
            raw = environ.get(TOKENS_ENV, "")
            items = [item.strip() for item in raw.split(",") if item.strip()]
            if any(":" not in item for item in items):
                raise TokensError(f"{TOKENS_ENV} holds comma-separated client:token pairs")
            pairs = dict(item.split(":", 1) for item in items)
        if not pairs:
            raise TokensError(
                f"no tokens: set {TOKENS_ENV}=client:token (or serve.tokens_file), or "
                f"serve.require_token=false for an endpoint only this machine reaches"
            )
        return cls(pairs)

    def client(self, authorization: str | None) -> str:
        """The client an `Authorization: Bearer <token>` header names; raises a 401 RequestError."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise RequestError(
                401,
                "no bearer token: send `Authorization: Bearer <token>` (the OpenAI client's api_key)",
                code="invalid_api_key",
                kind="authentication_error",
                headers={"WWW-Authenticate": "Bearer"},
            )
        digest = _digest(token.strip())
        found = None
        for known, name in self._clients:  # every comparison runs: the time says nothing about the token
            if hmac.compare_digest(known, digest):
                found = name
        if found is None:
            raise RequestError(
                401,
                "the bearer token is not known here",
                code="invalid_api_key",
                kind="authentication_error",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return found


@dataclass(frozen=True)
class ClientQuota:
    """Per client, over any `window_s` seconds: at most `requests` requests and `usd` dollars (None: no cap)."""

    requests: int | None = 60
    usd: float | None = 1.0
    window_s: float = 60.0


class ClientLimits:
    """Sliding-window request and dollar limits, per client, and with `budget` each client's
    `ClientBudgets`. A request is admitted (and counted) before it runs; its cost is charged when it
    ends, so a client over its dollars waits until enough of its spending leaves the window.
    `now` is a monotonic clock's (the windows); `wall` the same moment's time.time() (the budget's
    days), needed only with a budget."""

    def __init__(self, quota: ClientQuota, budget: ClientBudget | None = None) -> None:
        self.quota = quota
        self.budgets = ClientBudgets(budget) if budget is not None else None
        self._requests: dict[str, deque[float]] = {}
        self._spent: dict[str, deque[tuple[float, float]]] = {}

    def _wall(self, wall: float | None) -> float:
        if wall is None:
            raise ValueError("a client budget needs the wall-clock time (wall=time.time())")
        return wall

    def admit(self, client: str, now: float, wall: float | None = None) -> None:
        """Count a request of `client` at time `now`, or raise a 429 RequestError: over a window (with
        Retry-After), or over its budget (`insufficient_quota`)."""
        if self.budgets is not None:
            self.budgets.admit(client, self._wall(wall))
        q = self.quota
        requests = self._requests.setdefault(client, deque())
        spent = self._spent.setdefault(client, deque())
        while requests and requests[0] <= now - q.window_s:
            requests.popleft()
        while spent and spent[0][0] <= now - q.window_s:
            spent.popleft()
        if q.requests is not None and len(requests) >= q.requests:
            wait = requests[0] + q.window_s - now
            raise self._too_many(f"{q.requests} requests per {q.window_s:g} s", wait)
        if q.usd is not None and sum(usd for _, usd in spent) >= q.usd:
            total, wait = sum(usd for _, usd in spent), q.window_s
            for at, usd in spent:  # wait until the window holds less than the cap
                total -= usd
                if total < q.usd:
                    wait = at + q.window_s - now
                    break
            raise self._too_many(f"${q.usd:g} per {q.window_s:g} s", wait)
        requests.append(now)

    def charge(self, client: str, usd: float, now: float, wall: float | None = None) -> None:
        """What a request of `client` spent, when it ended."""
        if usd > 0:
            self._spent.setdefault(client, deque()).append((now, usd))
        if self.budgets is not None:
            self.budgets.charge(client, usd, self._wall(wall))

    def restore(self, journal: str | Path, now: float, wall_now: float, horizon_s: float = 3600.0) -> None:
        """The windows and budgets as the spend journal at `journal` left them (the server restarted):
        each admitted request and each call's dollars, per client, that fall within the window before
        `now`, and all of them for the budgets; `wall_now` is the same moment on the journal's clock
        (time.time()). Streamed: memory holds the window and the budgets' totals, whatever the journal's
        length; `horizon_s` bounds how long a request's calls may be opened after its admission."""
        start = now - self.quota.window_s
        for event in client_events(journal, horizon_s):
            at = now - (wall_now - event.t)
            if event.usd is None:
                if at > start:
                    self._requests.setdefault(event.client, deque()).append(at)
                continue
            if at > start and event.usd > 0:
                self._spent.setdefault(event.client, deque()).append((at, event.usd))
            if self.budgets is not None:
                self.budgets.charge(event.client, event.usd, event.t)
        # The windows pop from the left, oldest first; the journal is in its writer's order, nearly by time.
        self._requests = {client: deque(sorted(times)) for client, times in self._requests.items()}
        self._spent = {client: deque(sorted(spent)) for client, spent in self._spent.items()}

    def spent(self, client: str, now: float) -> float:
        """Dollars `client` spent within the window before `now`."""
        return sum(usd for at, usd in self._spent.get(client, ()) if at > now - self.quota.window_s)

    @staticmethod
    def _too_many(limit: str, wait_s: float) -> RequestError:
        seconds = max(1, math.ceil(wait_s))
        return RequestError(
            429,
            f"this client is over its limit of {limit}; retry after {seconds} s",
            code="rate_limit_exceeded",
            kind="rate_limit_error",
            headers={"Retry-After": str(seconds)},
        )


@dataclass(frozen=True)
class ClientBudget:
    """Per client: at most `usd` worker dollars per UTC day (`per="day"`) or over the server's whole life
    (`per="total"`, every restart counted)."""

    usd: float
    per: Literal["day", "total"] = "day"


# The openai SDK retries a 429 unless told otherwise; a spent budget does not come back within its retries.
_DO_NOT_RETRY = {"x-should-retry": "false"}


class ClientBudgets:
    """Each client's spend against its `ClientBudget`, on the wall clock (a day is a calendar day, UTC). Like
    the windows, a request is refused once its client has spent the budget; the requests it already has
    running may take it over by what they spend."""

    def __init__(self, budget: ClientBudget) -> None:
        self.budget = budget
        self._spent: dict[tuple[str, str], float] = {}

    def _period(self, wall: float) -> str:
        return "" if self.budget.per == "total" else time.strftime("%Y-%m-%d", time.gmtime(wall))

    def spent(self, client: str, wall: float) -> float:
        """Dollars `client` spent in the period that holds `wall` (time.time())."""
        return self._spent.get((client, self._period(wall)), 0.0)

    def admit(self, client: str, wall: float) -> None:
        """Raise a 429 RequestError (OpenAI's `insufficient_quota`) if `client` has spent its budget."""
        spent, b = self.spent(client, wall), self.budget
        if spent < b.usd:
            return
        if b.per == "total":
            raise RequestError(
                429,
                f"this client has spent its budget of ${b.usd:g} in total (${spent:.4f}); "
                "the server's operator can raise serve.client_budget_usd",
                code="insufficient_quota",
                kind="insufficient_quota",
                headers=_DO_NOT_RETRY,
            )
        seconds = max(1, math.ceil(86_400 - wall % 86_400))
        raise RequestError(
            429,
            f"this client has spent its budget of ${b.usd:g} for today (${spent:.4f}, UTC day "
            f"{self._period(wall)}); it renews at 00:00 UTC, retry after {seconds} s",
            code="insufficient_quota",
            kind="insufficient_quota",
            headers={"Retry-After": str(seconds), **_DO_NOT_RETRY},
        )

    def charge(self, client: str, usd: float, wall: float) -> None:
        """What a request of `client` spent, when it ended."""
        if usd > 0:
            key = (client, self._period(wall))
            self._spent[key] = self._spent.get(key, 0.0) + usd

    def restore(self, journal: str | Path, horizon_s: float = 3600.0) -> None:
        """Each client's spend as the spend journal at `journal` holds it (the server restarted): every
        call billed or lost for one of its requests, in the period it was settled in (streamed)."""
        for event in client_events(journal, horizon_s):
            if event.usd is not None:
                self.charge(event.client, event.usd, event.t)
