"""OpenAI Responses endpoints: `POST /v1/responses` on the one request flow.

The edge reads the body, checks it into a `ResponsesRequest` (smg.pipeline.responses_request:
unknown fields and what smg does not do yet get a 400 naming the field), maps it to the chat body
token mode prepares (chat template, tool and reasoning parsers) and runs it through `Flow.serve`
with the Responses renderer (smg.pipeline.responses_output), which shapes the engine's events as
output items: a whole `response` object, or the typed event stream.

Token mode only for now: a model served by HTTP workers alone answers 501 (translating to the
workers' chat completions and back is later work of issue 12).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import orjson
from aiohttp import web

from smg.api import requests as rq
from smg.errors import ApiError
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.responses_output import ResponsesRenderer
from smg.pipeline.responses_request import chat_body, parse_responses
from smg.pipeline.sampling import sampling_from_openai


def new_response_id() -> str:
    return f"resp_{os.urandom(24).hex()}"


class ResponsesRoutes:
    def __init__(
        self, *, flow: Flow, max_payload: int, new_id: Callable[[], str] = new_response_id
    ) -> None:
        self.flow = flow
        self.max_payload = max_payload
        self.new_id = new_id

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)

    async def create(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        parsed = parse_responses(body)
        chat = chat_body(parsed)
        sampling = sampling_from_openai(chat, chat=True)  # ranges, response_format
        if not self.flow.serves_tokens(parsed.model):
            raise ApiError(
                501,
                "responses_http_mode_unsupported",
                f"Model '{parsed.model}' is served by HTTP workers only; /v1/responses needs "
                "gRPC engines (token mode) in this gateway for now",
                type="invalid_request_error",
            )
        response_id = self.new_id()
        req = rq.flow_request(
            request,
            Kind.CHAT,
            "/v1/chat/completions",
            orjson.dumps(chat),
            chat,
            parsed.model,
            sampling,
            "resp_",
        )
        return await self.flow.serve(req, ResponsesRenderer(parsed, response_id), request)
