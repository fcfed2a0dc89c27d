"""OpenAI endpoints: read and check the body in the OpenAI shape, then run it through the flow.

Validation happens here, before the flow takes an admission permit, so a client's mistake never
waits in the admission queue; its errors are the OpenAI ones (codes and statuses as the Rust
gateway answers). The answer is rendered by the OpenAI renderer when an engine answers (gRPC
mode) and relayed as it is when an HTTP worker does.

Two ids per request: the client's (`request["request_id"]`, echoed in `X-Request-Id`) and the
engine's, which the gateway always makes (`engine_request_id`): it is what workers and engines
see, and the `id` of the OpenAI bodies the gateway builds itself (gRPC mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from smg.api import requests as rq
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.output import openai_renderer


class OpenAIRoutes:
    def __init__(self, *, flow: Flow, max_payload: int) -> None:
        self.flow = flow
        self.max_payload = max_payload

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, Kind.CHAT, "/v1/chat/completions", rq.check_chat, "chatcmpl-"
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, Kind.COMPLETION, "/v1/completions", rq.check_completion, "cmpl-"
        )

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(
            request, Kind.EMBEDDINGS, "/v1/embeddings", rq.check_embeddings, "embd-"
        )

    async def _serve(
        self,
        request: web.Request,
        kind: Kind,
        path: str,
        check: Callable[[dict[str, Any]], SamplingParams | None],
        prefix: str,
    ) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model = rq.require_model(body)
        sampling = check(body)
        req = rq.flow_request(request, kind, path, raw, body, model, sampling, prefix)
        return await self.flow.serve(req, openai_renderer, request)
