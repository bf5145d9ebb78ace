"""Preflight: one tiny request per worker before a run spends money on 200 iterations.

`check_workers` sends the same short prompt to every worker of the pool, with
that worker's own settings (so a parameter its model refuses is refused here),
and reports what came back: reachable or not, whether the model answered,
latency, tokens, the call's cost, the rate limits in force and, where it
failed, the provider's own words. `format_checks` prints the table.

A check *fails* when the call raised (bad key, unknown model, refused
parameter, no server). An empty answer is a *warning*: the probe's few tokens
may all have gone to reasoning, which says the worker's reasoning setting will
eat into real answers too. Simulated workers have nothing to reach and are not
probed (their calls would cost simulated money); a spent budget skips the probe
(the run then stops on its budget, as it would without the preflight).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.ledger import NO_NEW_CALLS
from conductor_rl.workers.providers.base import ProviderError, WorkerRequest

PROBE_PROMPT = "Reply with the single word: ready"
PROBE_MAX_TOKENS = 512  # enough for a minimal-reasoning model to think a little and answer
CONNECTION_KINDS = ("connection", "timeout", "replica_died")


@dataclass
class WorkerCheck:
    worker: str
    provider: str
    model: str
    status: str  # ok | warn | fail | skip
    reachable: bool
    answered: bool
    latency_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    limits: str = "none"
    answer: str = ""
    problem: str | None = None  # the exact failure, or why it is only a warning
    notes: list[str] = field(default_factory=list)  # how requests are shaped (e.g. temperature not sent)

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def limits_of(config: WorkerConfig) -> str:
    parts = [f"{config.rpm} rpm" if config.rpm else "", f"{config.tpm} tpm" if config.tpm else ""]
    return ", ".join(p for p in parts if p) or "none"


def probe_request(config: WorkerConfig) -> WorkerRequest:
    """The worker's own temperature and reasoning, on a prompt any model answers in a word."""
    return WorkerRequest(
        [{"role": "user", "content": PROBE_PROMPT}],
        min(config.max_tokens, PROBE_MAX_TOKENS),
        config.temperature,
        config.reasoning_budget,
        reasoning=config.reasoning,
    )


async def check_worker(
    worker: Any, config: WorkerConfig, timeout_s: float = 120.0, notes: Sequence[str] = ()
) -> WorkerCheck:
    """Probe one worker (anything with `async complete`); never raises for the worker's faults."""
    check = WorkerCheck(
        config.name,
        config.provider,
        config.model or "(simulated)",
        "fail",
        False,
        False,
        limits=limits_of(config),
        notes=list(notes),
    )
    if config.provider == "sim":
        check.status, check.problem = "skip", "simulated: nothing to reach, not probed"
        return check
    if config.provider == "conductor":
        check.status, check.problem = "skip", "the Conductor itself: a step given to it is a recursive call"
        return check
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            response = await worker.complete(probe_request(config))
    except TimeoutError:
        check.problem = (
            f"no answer within {timeout_s:g}s (a worker replica that cannot be placed waits for ever: "
            f"compare cluster.worker with `ray status`)"
        )
        return check
    except ProviderError as err:
        if err.kind in NO_NEW_CALLS:
            check.status, check.problem = "skip", f"not probed: {err}"
            return check
        check.reachable = err.kind not in CONNECTION_KINDS
        check.problem = f"{err.kind}: {err}"
        return check
    except Exception as err:  # a bug in a provider is a failed check, not a crashed preflight
        check.problem = f"{type(err).__name__}: {err}"
        return check
    check.reachable = True
    check.latency_s = response.latency_s or time.perf_counter() - started
    usage = response.usage
    check.input_tokens, check.output_tokens, check.reasoning_tokens = (
        usage.input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
    )
    check.cost_usd = response.cost_usd
    check.answer = " ".join(response.text.split())[:40]
    check.answered = bool(response.text.strip())
    if check.answered:
        check.status = "ok"
    else:
        check.status = "warn"
        why = (
            f"its {check.output_tokens} output tokens ({check.reasoning_tokens} reasoning) ran out before any answer"
            if response.empty_after_length
            else "it returned an empty answer"
        )
        check.problem = f"{why}: check workers.{config.name}.reasoning and max_tokens"
    return check


async def check_workers(
    workers: Sequence[Any],
    configs: Sequence[WorkerConfig],
    timeout_s: float = 120.0,
    notes: Sequence[Sequence[str]] | None = None,
) -> list[WorkerCheck]:
    """Probe every worker at once (`workers[i]` serves `configs[i]`)."""
    notes = notes or [()] * len(configs)
    return list(await asyncio.gather(*(check_worker(w, c, timeout_s, n) for w, c, n in zip(workers, configs, notes))))


def format_checks(checks: Sequence[WorkerCheck], wall_s: float | None = None) -> str:
    """The preflight table, then each problem and note in full."""
    header = (
        "worker",
        "provider",
        "model",
        "status",
        "reachable",
        "answered",
        "latency",
        "tokens in/out (reason)",
        "cost",
        "limits",
    )
    rows = [
        (
            c.worker,
            c.provider,
            c.model,
            c.status.upper(),
            "yes" if c.reachable else "no",
            "yes" if c.answered else "no",
            f"{c.latency_s:.2f}s" if c.reachable else "-",
            f"{c.input_tokens}/{c.output_tokens} ({c.reasoning_tokens})" if c.reachable else "-",
            f"${c.cost_usd:.6f}" if c.reachable else "-",
            c.limits,
        )
        for c in checks
    ]
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in (header, *rows)]
    for c in checks:
        if c.problem:
            lines.append(f"{c.status.upper()} {c.worker}: {c.problem}")
        lines.extend(f"note {c.worker}: {n}" for n in c.notes)
    failed = [c.worker for c in checks if c.failed]
    total = sum(c.cost_usd for c in checks)
    took = f" in {wall_s:.1f}s" if wall_s is not None else ""
    counts = ", ".join(
        f"{sum(c.status == s for c in checks)} {word}"
        for s, word in (("ok", "ok"), ("warn", "warned"), ("skip", "not probed"), ("fail", "failed"))
        if any(c.status == s for c in checks)
    )
    lines.append(
        f"{len(checks)} workers checked{took}: {counts}; the probes cost ${total:.6f}"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return "\n".join(lines)


class PreflightFailed(RuntimeError):
    """A worker failed its preflight check; the message is the table."""
