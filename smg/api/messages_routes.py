"""Anthropic Messages endpoints on the one request flow.

`POST /v1/messages`: the edge reads the body, checks it into a `MessagesRequest`
(smg.pipeline.messages_request: unknown fields and what smg does not do yet get a 400 naming
the field), maps it to the chat body token mode prepares (chat template, tool and reasoning
parsers) and runs it through `Flow.serve` with the Messages renderer
(smg.pipeline.messages_output): a whole `message`, or Anthropic's event stream. HTTP mode: the
same chat body goes to an HTTP worker's /v1/chat/completions and its answer is read back and
rendered as the same message and events (smg.flow.chat).

`POST /v1/messages/count_tokens`: the prompt's token count (`{"input_tokens": N}`) through the
model's chat template and tokenizer; a model with no tokenizer in the gateway (HTTP workers
only) is a 400 that says so.

Every error on these routes leaves in Anthropic's shape (smg.api.middleware `anthropic_route`).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from aiohttp import web

from smg import errors
from smg.api import requests as rq
from smg.api.stored import json_response, new_id
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.pipeline.chat_template import TemplateError
from smg.pipeline.messages_output import MessagesRenderer
from smg.pipeline.messages_request import chat_body, parse_messages
from smg.pipeline.sampling import sampling_from_openai


class MessagesRoutes:
    def __init__(
        self, *, flow: Flow, max_payload: int, make_id: Callable[[str], str] = new_id
    ) -> None:
        self.flow = flow
        self.max_payload = max_payload
        self.make_id = make_id

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self.create)
        app.router.add_post("/v1/messages/count_tokens", self.count_tokens)

    async def create(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        parsed = parse_messages(rq.parse_object(raw))
        chat = chat_body(parsed)
        sampling = sampling_from_openai(chat, chat=True)
        req = rq.flow_request(
            request,
            Kind.CHAT,
            "/v1/chat/completions",
            orjson.dumps(chat),
            chat,
            parsed.model,
            sampling,
            "msg_",
        )
        render = MessagesRenderer(parsed, self.make_id("msg_"))
        return await self.flow.serve(req, render, request)

    async def count_tokens(self, request: web.Request) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        parsed = parse_messages(rq.parse_object(raw), count=True)
        model = self.flow.resolve_model(parsed.model)  # unknown: 404
        tok = self.flow.tokenizer(model)  # HTTP workers only: 400 tokenizer_not_available
        if tok.chat_template is None:
            raise errors.invalid_request(
                f"Model '{model}' has no chat template", param="model", code="no_chat_template"
            )
        chat = chat_body(parsed)
        try:
            prompt = tok.chat_template.render(
                chat["messages"],
                tools=chat.get("tools"),
                add_generation_prompt=True,
                chat_template_kwargs=chat["chat_template_kwargs"],
            )
        except TemplateError as exc:
            raise errors.invalid_request(f"Chat template: {exc}", param="messages") from None
        ids = await tok.encode(prompt)
        return json_response({"input_tokens": len(ids)})
