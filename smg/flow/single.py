"""One worker per attempt: the dispatch plan outside PD mode.

The runner picks a worker and opens the attempt through its transport adapter, retrying on
another worker before anything reaches the client: a gRPC engine gets the prepared token request
(`start_stream`: its first events are already in when the attempt counts as open), an HTTP
worker the client's own bytes (`HttpBackend.open`: the status line is in). In token mode a mixed
fleet may hand the request to either; in pass-through mode there are HTTP workers only. The
answer then goes to the client through the renderer (an engine's events) or the byte relay (an
HTTP worker's answer), which settles the attempt. A surface the gateway renders itself
(Responses: `chat.chat_renderer` says so) has an HTTP worker's chat answer read back and rendered
instead (chat.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from smg import tracing
from smg.core.snapshots import WorkerSnapshot
from smg.flow import chat, render
from smg.flow.answer import Answer
from smg.flow.prepare import Prepared
from smg.flow.relay import HttpRelay
from smg.flow.render import ROUTED_WORKER_HEADER, ChatRenderer, RenderFactory
from smg.flow.request import Request
from smg.flow.runner import Attempt, Runner
from smg.pipeline.backends.grpc_pool import (
    EnginePool,
    EngineStream,
    is_grpc_url,
    request_for,
    start_stream,
)
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.policies.base import RouteRequest


class SingleWorker:
    def __init__(self, *, runner: Runner, relay: HttpRelay, engines: EnginePool) -> None:
        self.runner = runner
        self.relay = relay
        self.engines = engines

    async def serve(
        self,
        client: web.Request,
        req: Request,
        raw: bytes,
        route: RouteRequest,
        prepared: Prepared | None,
        render_with: RenderFactory,
    ) -> Answer:
        """`raw`: the bytes an HTTP worker gets (engine ids already the gateway's). A whole
        answer the gateway renders comes back as a `Whole` (the caller's server writes it)."""
        attempt = await self.runner.open(
            model=req.model,
            route=route,
            send=self._sender(req, raw, prepared),
            request_id=req.client_id,
        )
        if isinstance(attempt.response, H1Response):
            renderer = chat.chat_renderer(render_with)
            if renderer is not None and attempt.response.status == 200:
                return await self._read_back(client, req, attempt, renderer)
            # relayed as bytes (an error status too: the worker speaks OpenAI's error shape)
            with tracing.stage("stream"):
                return await self.relay.answer(client, attempt, req.client_id, req.stream)
        assert prepared is not None
        return await self._render(client, req, attempt, prepared, render_with)

    async def _read_back(
        self,
        client: web.Request,
        req: Request,
        attempt: Attempt[H1Response],
        renderer: ChatRenderer,
    ) -> web.StreamResponse:
        worker_id = attempt.worker.worker_id
        headers = {"X-Request-Id": req.client_id, ROUTED_WORKER_HEADER: worker_id}
        answer = chat.ChatAnswer(
            self.relay.backend,
            client,
            attempt.response,
            renderer,
            request_id=req.client_id,
            worker_id=worker_id,
            headers=headers,
        )
        try:
            return await answer.answer(req.stream)
        finally:
            self.runner.finish(attempt, answer.success)

    def _sender(
        self, req: Request, raw: bytes, prepared: Prepared | None
    ) -> Callable[[WorkerSnapshot, float], Awaitable[Any]]:
        """How one attempt is opened on a worker, by its transport; `timeout_s` is what is left
        of the request's deadline. Both carry the gateway's engine id, never the client's."""
        engine_request = None if prepared is None else prepared.engine_request(req.stream)
        engines, backend = self.engines, self.relay.backend
        path, headers, engine_id, model = req.path, req.headers, req.engine_id, req.model

        def send(worker: WorkerSnapshot, timeout_s: float) -> Awaitable[Any]:
            if engine_request is not None and is_grpc_url(worker.url):
                client = engines.client(worker.url)
                request = request_for(engine_request, model, worker, client)
                return start_stream(client, request, timeout_s)
            fwd = backend.forward_headers(headers, worker, engine_id)
            return backend.open(worker, path, raw, fwd, timeout_s)

        return send

    async def _render(
        self,
        client: web.Request,
        req: Request,
        attempt: Attempt[EngineStream],
        prepared: Prepared,
        render_with: RenderFactory,
    ) -> Answer:
        renderer = render_with(prepared.spec, prepared.tokenizer.decode_sync, self.runner.clock.now)
        headers = {"X-Request-Id": req.client_id, ROUTED_WORKER_HEADER: attempt.worker.worker_id}
        runner = self.runner

        def finish(ok: bool | None) -> None:
            runner.finish(attempt, ok)

        tracing.first_token()
        if not req.stream:
            with tracing.stage("generate"):
                return await render.whole(
                    attempt.response, renderer, headers, req.engine_id, finish
                )
        resp = render.sse_response(renderer, headers)
        with tracing.stage("stream"):
            await render.stream(client, resp, attempt.response, renderer, req.engine_id, finish)
        return resp
