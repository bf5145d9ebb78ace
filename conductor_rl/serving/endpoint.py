"""A served Conductor's request handling: authenticate, check, admit, plan,
run the plan on the workers, reply (or stream) in OpenAI's format. Plain
asyncio, no Ray and no web framework: `actors/conductor_app.py` is the Ray
Serve shell around it, and tests drive it directly.

- Plans, two ways (`serve.batching`):
  - continuous (given `sample_one`, a coroutine sampling one prompt): each
    request's plan, and each recursive call's, is one request to an engine that
    batches by itself (vLLM's asynchronous engine in actors/serving_generator.py):
    it joins the running batch at the engine's next step and comes back as soon
    as it is finished (`DirectPlanWriter`); nothing waits for a window or for
    other requests' longer plans.
  - window (`sample_batch(prompt_ids, shapes, seeds, temperature)` only, one
    completion per prompt: the offline generator actors, or an in-process
    `Conductor`, which has no running batch to join): requests that arrive within
    `batch_window_s` of each other are sampled in one batch per temperature
    (`BatchedPlanWriter`), so concurrent clients share the generator's batching.
- Steps run through the worker providers given (on a cluster, the
  rate-limited worker pools and their ledger), the plan's roster being the
  request's worker subset, each worker under its number in the whole pool as `--workers` lists it.
- Money: a client is admitted before its request runs and charged what its
  workers spent when it ends (`Admission`; per-client windows in
  `conductor_rl/serving/access.py`). A failure or timeout mid-plan replies
  with an error that carries what was spent, never a hung connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from conductor_rl.config import Config
from conductor_rl.orchestrator import Answer
from conductor_rl.plan.roster import offered_places, roster_for
from conductor_rl.policy.conductor import Completion
from conductor_rl.rollout.recursion import BatchedPlanWriter, DirectPlanWriter, PlanWriter
from conductor_rl.rollout.rollouts import run_rollout, step_record
from conductor_rl.rollout.workflow import StepTrace, Task
from conductor_rl.serving.access import BearerTokens, ClientLimits
from conductor_rl.serving.chat_format import (
    ChatRequest,
    RequestError,
    RequestLimits,
    check_declared_size,
    chunk,
    completion,
    completion_id,
    parse_chat_request,
    read_body,
    sse,
    usage_of,
)
from conductor_rl.serving.metering import RequestMeter
from conductor_rl.system import System
from conductor_rl.workers.providers import Provider

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from conductor_rl.plan.shape import PlanShape
    from conductor_rl.policy.sampling import Sample

# sample_batch(prompt_ids, shapes, seeds, temperature): one completion per prompt
SampleBatch = Callable[[list[list[int]], list["PlanShape | None"], list[int], float], list["Sample"]]
# sample_one(prompt_ids, shape, seed, temperature): one completion, as soon as it is finished
SampleOne = Callable[[list[int], "PlanShape | None", int, float], Awaitable["Sample"]]
ANONYMOUS = "anonymous"  # the client of an endpoint that takes no token


class Admission(Protocol):
    """Per-client limits: `admit` before a request runs (raises a 429 RequestError), `charge` after."""

    async def admit(self, client: str, request_id: str) -> None: ...
    async def charge(self, client: str, usd: float) -> None: ...


class LocalAdmission:
    """`ClientLimits` in this process (one replica; a cluster shares one in an actor)."""

    def __init__(
        self,
        limits: ClientLimits,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits, self.clock, self.wall_clock = limits, clock, wall_clock

    async def admit(self, client: str, request_id: str) -> None:
        self.limits.admit(client, self.clock(), self.wall_clock())

    async def charge(self, client: str, usd: float) -> None:
        self.limits.charge(client, usd, self.clock(), self.wall_clock())


@dataclass
class Reply:
    """An HTTP reply: a JSON body, or a stream of server-sent events."""

    status: int
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class RequestFailed(Exception):
    """A request that ran but did not end with an answer; `spent` is what its steps cost."""

    def __init__(self, error: RequestError, conductor: dict[str, Any]) -> None:
        super().__init__(error.message)
        self.error, self.conductor = error, conductor

    def body(self) -> dict[str, Any]:
        return {**self.error.body(), "conductor": self.conductor}


class ChatEndpoint:
    """Answers chat-completion requests with a Conductor and the configured worker pool."""

    def __init__(
        self,
        config: Config,
        model_name: str,
        sample_batch: SampleBatch | None,
        tokenizer: PreTrainedTokenizerBase,
        workers: Sequence[Provider],
        *,
        tokens: BearerTokens | None,
        admission: Admission,
        limits: RequestLimits,
        timeout_s: float,
        batch_window_s: float = 0.02,
        sample_one: SampleOne | None = None,
    ) -> None:
        """`workers`: one provider per configured worker, in order; `tokens` None: no authentication.
        `sample_one`: plans one request at a time on an engine that batches by itself (continuous
        batching); None: `sample_batch` in windows of `batch_window_s`."""
        if sample_batch is None and sample_one is None:
            raise ValueError("ChatEndpoint needs sample_batch or sample_one to write plans")
        if len(workers) != len(config.workers):
            raise ValueError(f"{len(workers)} worker(s) given for the {len(config.workers)} configured")
        self.config, self.model_name, self.tokenizer = config, model_name, tokenizer
        self.sample_batch, self.workers = sample_batch, list(workers)
        self.tokens, self.admission, self.limits, self.timeout_s = tokens, admission, limits, timeout_s
        self.batch_window_s, self.sample_one = batch_window_s, sample_one
        self.pool = [w.name for w in config.workers]
        self.system = System(config, tokenizer)
        self.step_limits = self.system.step_limits
        self._writers: dict[float, PlanWriter] = {}

    # ------------------------------------------------------------ routes

    def models(self, authorization: str | None) -> Reply:
        """GET /v1/models: the one model served."""
        try:
            self._client(authorization)
        except RequestError as err:
            return error_reply(err)
        return Reply(
            200,
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "conductor-rl"}],
            },
        )

    async def chat_from(
        self, chunks: AsyncIterator[bytes], authorization: str | None, content_length: str | None
    ) -> Reply:
        """POST /v1/chat/completions from the body as it arrives: the token is checked first, then the
        declared size, and only then is the body read, capped (an unauthenticated or oversized body is
        refused with nothing of it in memory)."""
        try:
            self._client(authorization)
            check_declared_size(content_length, self.limits)
            raw = await read_body(chunks, self.limits)
        except RequestError as err:
            return error_reply(err)
        return await self.chat(raw, authorization)

    async def chat(self, raw: bytes, authorization: str | None) -> Reply:
        """POST /v1/chat/completions."""
        request_id, created = completion_id(), int(time.time())
        try:
            client = self._client(authorization)
            request = parse_chat_request(raw, self.model_name, self.pool, self.limits)
            await self.admission.admit(client, request_id)
        except RequestError as err:
            return error_reply(err)
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        run = asyncio.ensure_future(self._run(request, request_id, client, events))
        if request.stream:
            return Reply(
                200,
                stream=self._stream(run, events, request, request_id, created),
                headers={"Cache-Control": "no-cache"},
            )
        try:
            answer, usage = await run
        except RequestFailed as failed:
            return Reply(failed.error.status, failed.body(), headers=failed.error.headers)
        return Reply(
            200,
            completion(request_id, self.model_name, answer.final_answer or "", usage, conductor_field(answer), created),
        )

    # ------------------------------------------------------------ one request

    async def _run(
        self, request: ChatRequest, request_id: str, client: str, events: asyncio.Queue[dict[str, Any]]
    ) -> tuple[Answer, dict[str, int]]:
        """The answer and its usage; raises RequestFailed. Charges the client what was spent."""
        finished: list[StepTrace] = []

        def on_step(trace: StepTrace) -> None:
            finished.append(trace)
            events.put_nowait(step_event(trace))

        meter = RequestMeter()
        try:
            async with asyncio.timeout(self.timeout_s):
                answer, usage = await self._answer(request, request_id, events, on_step, meter)
            if answer.final_answer is None:
                raise RequestFailed(failure_of(answer), conductor_field(answer))
            return answer, usage
        except TimeoutError:
            raise RequestFailed(
                RequestError(
                    504, f"no answer within serve.timeout_s = {self.timeout_s:g} s", code="timeout", kind="server_error"
                ),
                {
                    "steps": [step_event(t) for t in finished],
                    "cost_usd": sum(t.cost_usd for t in finished),
                    "charged_usd": meter.charged_usd,  # the calls cut off included, at their worst case
                },
            ) from None
        finally:
            # Also when the client hung up (this task cancelled): what was started is charged.
            await self.admission.charge(client, meter.charged_usd)

    async def _answer(
        self,
        request: ChatRequest,
        request_id: str,
        events: asyncio.Queue[dict[str, Any]],
        on_step: Callable[[StepTrace], None],
        meter: RequestMeter,
    ) -> tuple[Answer, dict[str, int]]:
        c = self.config.conductor
        # The request's subset, each worker under its number in the whole pool (plan/roster.py).
        roster = (
            self.system.pool_roster
            if request.workers is None
            else roster_for(self.config, offered_places(self.config, request.workers))
        )
        workers = meter.watch(roster.select(self.workers), roster.select([w.price for w in self.config.workers]))
        limits = roster.select(self.step_limits)
        max_steps = request.max_steps or c.max_steps
        prompts = self.system.prompt(max_steps)
        question = request.question_text()
        prompt_ids = self.tokenizer(prompts.text(question, roster), add_special_tokens=False)["input_ids"]
        temperature = self._temperature(request)
        writer = self._writer(temperature)
        seed = secrets.randbelow(2**31) if request.seed is None else request.seed
        started = time.perf_counter()
        sample = await writer.write(prompt_ids, prompts.shape_for(roster), seed)
        conductor_s = time.perf_counter() - started
        plan = Completion.of(sample, c.response_prefix, len(prompt_ids))
        events.put_nowait(
            {
                "event": "plan",
                "completion": plan.text,
                "workers": roster.select(self.pool),
                "model_ids": list(roster.model_ids),
                "conductor_s": conductor_s,
            }
        )
        recursion = self.system.recursion(writer, "answer", seed, depth=request.max_depth, max_steps=max_steps)
        rollout = await run_rollout(
            plan.text,
            Task(id=request_id, question=question),
            workers,
            limits,
            max_steps,
            None,
            sample_key=request_id,
            recursion=recursion,
            on_step=on_step,
            roster=roster,
        )
        answer = Answer.of([rollout], [plan], conductor_s)
        usage = usage_of(
            plan.prompt_tokens + answer.usage.input_tokens, plan.completion_tokens + answer.usage.output_tokens
        )
        return answer, usage

    async def _stream(
        self,
        run: asyncio.Future,
        events: asyncio.Queue[dict[str, Any]],
        request: ChatRequest,
        request_id: str,
        created: int,
    ) -> AsyncIterator[bytes]:
        """Server-sent events: the role, the plan and each step as they happen (`conductor` field),
        then the answer's text, the finish, the usage when asked for, and [DONE]."""

        def event(**fields: Any) -> bytes:
            return sse(chunk(request_id, self.model_name, created, **fields))

        try:
            yield event(delta={"role": "assistant", "content": ""})
            waiting = asyncio.ensure_future(events.get())
            while True:
                await asyncio.wait([run, waiting], return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    yield event(conductor=waiting.result())
                    waiting = asyncio.ensure_future(events.get())
                    continue
                waiting.cancel()
                while not events.empty():
                    yield event(conductor=events.get_nowait())
                break
            try:
                answer, usage = run.result()
            except RequestFailed as failed:
                yield sse(failed.body())
                yield sse("[DONE]")
                return
            yield event(delta={"content": answer.final_answer or ""})
            yield event(finish_reason="stop", conductor={"event": "done", **conductor_field(answer)})
            if request.include_usage:
                yield event(usage=usage)
            yield sse("[DONE]")
        finally:
            if not run.done():  # the client went away: stop its workflow
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run

    # ------------------------------------------------------------ helpers

    def _client(self, authorization: str | None) -> str:
        return ANONYMOUS if self.tokens is None else self.tokens.client(authorization)

    def _temperature(self, request: ChatRequest) -> float:
        return self.system.generation("answer").temperature if request.temperature is None else request.temperature

    @property
    def batching(self) -> str:
        """How plans are sampled: "continuous" (one engine request each) or "window"."""
        return "window" if self.sample_one is None else "continuous"

    def _writer(self, temperature: float) -> PlanWriter:
        """One writer per temperature: a generator batch samples at one temperature."""
        if temperature in self._writers:
            return self._writers[temperature]
        if self.sample_one is not None:
            one = self.sample_one

            async def sample_one(prompt_ids: list[int], shape: PlanShape | None, seed: int) -> Sample:
                return await one(prompt_ids, shape, seed, temperature)

            self._writers[temperature] = DirectPlanWriter(sample_one)
        else:
            batch = self.sample_batch
            assert batch is not None  # __init__ refuses an endpoint with neither

            def sample(prompt_ids: list[list[int]], shapes: list[PlanShape | None], seeds: list[int]) -> list[Sample]:
                return batch(prompt_ids, shapes, seeds, temperature)

            self._writers[temperature] = BatchedPlanWriter(sample, window_s=self.batch_window_s)
        return self._writers[temperature]


def watch_page() -> str:
    """GET /: one page, no build step, that asks with a token and shows the stream as it arrives."""
    return (Path(__file__).parent / "page.html").read_text()


def error_reply(err: RequestError) -> Reply:
    return Reply(err.status, err.body(), headers=err.headers)


def step_event(trace: StepTrace) -> dict[str, Any]:
    """A finished step as the `conductor` field streams it."""
    record = step_record(trace)
    return {
        "event": "step",
        **{
            k: record[k]
            for k in (
                "index",
                "worker",
                "subtask",
                "access",
                "response",
                "usage",
                "cost_usd",
                "latency_s",
                "error",
                "simulated",
                "inner",
            )
        },
    }


def conductor_field(answer: Answer) -> dict[str, Any]:
    """The reply's extension field: the plan, each step, the totals."""
    return {
        "plan": None
        if answer.plan is None
        else [{"model_id": s.model_id, "subtask": s.subtask, "access": list(s.access)} for s in answer.plan.steps],
        "completion": answer.completion,
        "plan_error": answer.plan_error,
        "steps": [
            {
                "index": s.index,
                "worker": s.worker,
                "subtask": s.subtask,
                "access": list(s.access),
                "latency_s": s.latency_s,
                "usage": {"input_tokens": s.usage.input_tokens, "output_tokens": s.usage.output_tokens},
                "cost_usd": s.cost_usd,
                "error": s.error,
                "inner": s.inner,
            }
            for s in answer.steps
        ],
        "cost_usd": answer.cost_usd,
        "conductor_tokens": {"completion": answer.completion_tokens},
        "conductor_s": answer.conductor_s,
        "wall_s": answer.wall_s,
        "simulated": answer.simulated,
    }


def failure_of(answer: Answer) -> RequestError:
    """Why a run ended without an answer."""
    if answer.plan_error:
        return RequestError(
            500,
            f"the Conductor's plan did not parse ({answer.plan_error}); ask again, perhaps at a lower temperature",
            code="plan_error",
            kind="server_error",
        )
    reason = answer.infrastructure_error or "the workflow ended without an answer"
    return RequestError(502, f"a worker failed mid-plan: {reason}", code="worker_error", kind="server_error")
