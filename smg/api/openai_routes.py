"""OpenAI endpoints: validate, admit, then proxy (HTTP workers) or run the token pipeline
(models served by gRPC engines). Validation happens before a permit is taken, so a client's
mistake never waits in the admission queue.

Two ids per request: the client's (`request["request_id"]`, echoed in `X-Request-Id`) and the
engine's, which the gateway always makes (`engine_request_id`): it is what workers and engines
see, and the `id` of the OpenAI bodies the gateway builds itself (gRPC mode).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from smg.actors.request import InFlight
from smg.api import requests as rq
from smg.api.admission import Admission
from smg.api.pd_routes import PdRoutes
from smg.api.pipeline_routes import ROUTING_KEY_HEADER, PipelineRoutes
from smg.api.relay import HttpRelay
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.engine_ids import engine_body
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.runner import Runner, route_text


class OpenAIRoutes:
    def __init__(
        self,
        *,
        runner: Runner,
        relay: HttpRelay,
        pipeline: PipelineRoutes | None,
        admission: Admission,
        inflight: InFlight,
        max_payload: int,
        wants_text: bool,
        pd: PdRoutes | None = None,
    ) -> None:
        self.runner = runner
        self.relay = relay
        self.pipeline = pipeline
        self.admission = admission
        self.inflight = inflight
        self.max_payload = max_payload
        self.wants_text = wants_text  # the policy keys on request text (cache-aware, hashing)
        self.pd = pd  # prefill/decode disaggregation: every request goes to a PD pair

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, "/v1/chat/completions", rq.check_chat, chat=True, prefix="chatcmpl-"
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, "/v1/completions", rq.check_completion, chat=False, prefix="cmpl-"
        )

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, "/v1/embeddings", rq.check_embeddings, chat=None, prefix="embd-"
        )

    async def _serve(
        self,
        request: web.Request,
        path: str,
        check: Callable[[dict[str, Any]], SamplingParams | None],
        *,
        chat: bool | None,
        prefix: str,
    ) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model = rq.require_model(body)
        sampling = check(body)
        self.runner.candidates(model)  # unknown model: 404 before taking a permit
        stream = body.get("stream") is True
        request_id: str = request["request_id"]
        engine_id = rq.engine_request_id(request, prefix)
        raw = engine_body(raw, body, engine_id)
        pipeline = self.pipeline
        if sampling is not None and pipeline is not None and pipeline.serves(model):
            await self.admission.acquire()
            try:
                with self.inflight.track(request_id):
                    if chat:
                        prepared = await pipeline.prepare_chat(body, model, engine_id, sampling)
                    else:
                        prepared = await pipeline.prepare_completion(
                            body, model, engine_id, sampling
                        )
                    return await pipeline.run(
                        request, prepared, raw=raw, path=path, stream=stream, request_id=request_id
                    )
            finally:
                self.admission.release()
        return await self._proxy(request, path, raw, body, model, stream, engine_id)

    async def _proxy(
        self,
        request: web.Request,
        path: str,
        raw: bytes,
        body: dict[str, Any],
        model: str,
        stream: bool,
        engine_id: str,
    ) -> web.StreamResponse:
        request_id: str = request["request_id"]
        route = RouteRequest(
            text=route_text(body) if self.wants_text else None,
            routing_key=request.headers.get(ROUTING_KEY_HEADER),
            model=model,
        )
        await self.admission.acquire()
        try:
            with self.inflight.track(request_id):
                if self.pd is not None:
                    return await self.pd.serve(
                        request,
                        path=path,
                        body=body,
                        candidates=self.runner.candidates(model),
                        route=route,
                        stream=stream,
                        request_id=request_id,
                        engine_id=engine_id,
                    )
                backend = self.relay.backend
                headers = request.headers

                def send(
                    worker: WorkerSnapshot, timeout_s: float
                ) -> Awaitable[aiohttp.ClientResponse]:
                    return backend.open(
                        worker,
                        path,
                        raw,
                        backend.forward_headers(headers, worker, engine_id),
                        timeout_s,
                    )

                attempt = await self.runner.open(
                    model=model, route=route, send=send, request_id=request_id
                )
                return await self.relay.answer(request, attempt, request_id, stream)
        finally:
            self.admission.release()

    async def relay_native(
        self, request: web.Request, path: str, raw: bytes, body: dict[str, Any], model: str
    ) -> web.StreamResponse:
        """A native endpoint for a model served by HTTP workers only: relay it as it is (with the
        gateway's engine id in place of any the client named)."""
        stream = body.get("stream") is True
        engine_id = rq.engine_request_id(request, "req-")
        raw = engine_body(raw, body, engine_id)
        return await self._proxy(request, path, raw, body, model, stream, engine_id)
