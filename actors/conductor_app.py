"""A served Conductor on Ray Serve: a FastAPI ingress around
conductor_rl/serving/endpoint.py's `ChatEndpoint`, in `serve.replicas`
replicas (or Ray Serve's autoscaling), all sharing the generator engines, the
worker pools with their ledger, and one `ClientLimitsActor` holding every
client's request and dollar windows. Ray Serve's dashboard shows requests and
latency per route; `conductor_serve_cost_usd` adds what each client spent.

Routes: POST /v1/chat/completions, GET /v1/models, GET /health, and GET /: a page where a person
asks a question and watches the plan, each step and the answer arrive (conductor_rl/serving/page.html).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import ray
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from ray import serve
from ray.actor import ActorHandle

from conductor_rl.config import Config, seat_of
from conductor_rl.serving.access import BearerTokens, ClientBudget, ClientLimits, ClientQuota
from conductor_rl.serving.chat_format import RequestError, RequestLimits
from conductor_rl.serving.endpoint import ChatEndpoint, Reply, SampleBatch, SampleOne, watch_page
from conductor_rl.workers.providers import Provider

if TYPE_CHECKING:
    from conductor_rl.plan.shape import PlanShape
    from conductor_rl.policy.sampling import Sample

app = FastAPI(title="conductor-rl", description="A Conductor and its worker pool behind the OpenAI chat API")


@ray.remote(num_cpus=0)
class ClientLimitsActor:
    """Every replica's clients in one place: `ClientLimits` as an actor."""

    def __init__(
        self,
        quota: ClientQuota,
        budget: ClientBudget | None = None,
        journal: str | None = None,
        request_timeout_s: float = 300.0,
    ) -> None:
        """`journal`: the server's spend journal, whose requests and spend fill the windows and the
        budgets, so that a restarted server holds its clients to what they used before it (read as a
        stream; a request's calls are looked for up to twice `request_timeout_s`, at least an hour)."""
        self.limits = ClientLimits(quota, budget)
        if journal is not None:
            horizon_s = max(3600.0, 2 * request_timeout_s)
            self.limits.restore(journal, time.monotonic(), time.time(), horizon_s)

    def admit(self, client: str) -> tuple[int, str, dict[str, str], str | None, str] | None:
        """None when admitted, else the 429's fields (an exception's own fields do not cross Ray)."""
        try:
            self.limits.admit(client, time.monotonic(), time.time())
        except RequestError as err:
            return err.status, err.message, err.headers, err.code, err.kind
        return None

    def charge(self, client: str, usd: float) -> None:
        self.limits.charge(client, usd, time.monotonic(), time.time())


class SharedAdmission:
    """`Admission` through a ClientLimitsActor; `on_charge(client, usd)` sees every charge (metrics)."""

    def __init__(
        self,
        actor: ActorHandle,
        on_charge: Callable[[str, float], None] = lambda client, usd: None,
        ledger: ActorHandle | None = None,
    ) -> None:
        """`ledger`: the worker pools', which writes each admitted request's client to the spend journal."""
        self.actor, self.on_charge, self.ledger = actor, on_charge, ledger

    async def admit(self, client: str, request_id: str) -> None:
        refused = await self.actor.admit.remote(client)
        if refused is not None:
            status, message, headers, code, kind = refused
            raise RequestError(status, message, headers=headers, code=code, kind=kind)
        if self.ledger is not None:
            await self.ledger.tag_request.remote(request_id, client)

    async def charge(self, client: str, usd: float) -> None:
        self.on_charge(client, usd)
        await self.actor.charge.remote(client, usd)


def respond(reply: Reply) -> Response:
    if reply.stream is not None:
        return StreamingResponse(
            reply.stream, status_code=reply.status, media_type="text/event-stream", headers=reply.headers
        )
    return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)


@serve.deployment
@serve.ingress(app)
class ConductorServer:
    def __init__(
        self,
        config: Config,
        model_name: str,
        tokenizer_path: str,
        generator_actors: Sequence[ActorHandle],
        workers: Sequence[Provider],
        limits_actor: ActorHandle,
        tokens: BearerTokens | None,
        ledger: ActorHandle | None = None,
        continuous: bool = False,
    ) -> None:
        """`tokens`: digests only (the job read the tokens); None: no authentication. `ledger`: the
        worker pools' (each admitted request's client goes to its spend journal). `continuous`: the
        generator actors are ServingGeneratorActors (one request each, continuous batching), else
        GeneratorActors (batches of serve.batch_window_s)."""
        from ray.util.metrics import Counter
        from transformers import AutoTokenizer

        from actors.generator import GeneratorPool
        from actors.serving_generator import ServingGenerators

        c, s = config.conductor, config.serve
        sample_batch: SampleBatch | None = None
        sample_one: SampleOne | None = None
        if continuous:
            engines = ServingGenerators(generator_actors)

            async def sample_one(
                prompt_ids: list[int], shape: PlanShape | None, seed: int, temperature: float
            ) -> Sample:
                return await engines.sample(prompt_ids, shape, seed, temperature, c.max_new_tokens, c.top_p)

        else:
            generators = GeneratorPool.of(generator_actors)

            def sample_batch(
                prompt_ids: list[list[int]], shapes: list[PlanShape | None], seeds: list[int], temperature: float
            ) -> list[Sample]:
                groups = generators.sample(
                    prompt_ids, 1, temperature, c.max_new_tokens, c.top_p, seed=seeds, shape=shapes
                )
                return [group[0] for group in groups]

        cost = Counter(
            "conductor_serve_cost_usd", "Worker dollars spent by served requests, per client", tag_keys=("client",)
        )

        def count(client: str, usd: float) -> None:
            if usd > 0:
                cost.inc(usd, tags={"client": client})

        self.endpoint = ChatEndpoint(
            config,
            model_name,
            sample_batch,
            AutoTokenizer.from_pretrained(tokenizer_path),
            workers,
            tokens=tokens,
            admission=SharedAdmission(limits_actor, count, ledger),
            limits=RequestLimits(
                s.max_request_bytes, s.max_messages, c.max_steps, c.max_depth, seat_of(config.workers)
            ),
            timeout_s=s.timeout_s,
            batch_window_s=s.batch_window_s,
            sample_one=sample_one,
        )

    @app.get("/")
    def page(self) -> HTMLResponse:
        return HTMLResponse(watch_page())

    @app.get("/health")
    def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models(self, request: Request) -> Response:
        return respond(self.endpoint.models(request.headers.get("authorization")))

    @app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Response:
        headers = request.headers
        return respond(
            await self.endpoint.chat_from(request.stream(), headers.get("authorization"), headers.get("content-length"))
        )
