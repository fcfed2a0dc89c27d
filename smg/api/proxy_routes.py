"""OpenAI endpoints in HTTP mode: validate, admit, route, relay.

Streams are relayed chunk by chunk as they arrive (`write` waits for the client to drain: that is
the back-pressure); a client that disconnects cancels the handler (aiohttp handler cancellation),
which closes the upstream connection at once. A worker that dies mid-stream ends the client's
stream with an error event, never a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from smg import errors
from smg.actors.request import InFlight
from smg.actors.snapshots import WorkerSnapshot
from smg.api import requests as rq
from smg.api.admission import Admission
from smg.pipeline.backends.http import DROP_RESPONSE, HttpBackend, forward_headers
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.runner import Attempt, Runner, outcome_of, route_text

log = structlog.get_logger("smg.proxy")

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def sse_error(err: errors.ApiError) -> bytes:
    return b"data: " + err.to_json() + b"\n\ndata: [DONE]\n\n"


class ProxyRoutes:
    def __init__(
        self,
        *,
        runner: Runner,
        backend: HttpBackend,
        admission: Admission,
        inflight: InFlight,
        max_payload: int,
        wants_text: bool,
    ) -> None:
        self.runner = runner
        self.backend = backend
        self.admission = admission
        self.inflight = inflight
        self.max_payload = max_payload
        self.wants_text = wants_text  # the policy keys on request text (cache-aware, hashing)

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/generate", self.generate)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "/v1/chat/completions", rq.check_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "/v1/completions", rq.check_completion)

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "/v1/embeddings", rq.check_embeddings)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._proxy(request, "/generate", None, model_required=False)

    async def _proxy(
        self,
        request: web.Request,
        path: str,
        check: Callable[[dict[str, Any]], None] | None,
        *,
        model_required: bool = True,
    ) -> web.StreamResponse:
        raw = await rq.read_body(request, self.max_payload)
        body = rq.parse_object(raw)
        model: str | None = rq.require_model(body) if model_required else body.get("model")
        if check is not None:
            check(body)
        self.runner.candidates(model)  # unknown model: 404 before taking a permit
        route = RouteRequest(
            text=route_text(body) if self.wants_text else None,
            routing_key=request.headers.get(ROUTING_KEY_HEADER),
            model=model,
        )
        stream = body.get("stream") is True
        request_id: str = request["request_id"]
        await self.admission.acquire()
        try:
            with self.inflight.track(request_id):
                backend = self.backend
                headers = request.headers

                def send(worker: WorkerSnapshot) -> Awaitable[aiohttp.ClientResponse]:
                    return backend.open(
                        worker, path, raw, forward_headers(headers, worker, request_id)
                    )

                attempt = await self.runner.open(model=model, route=route, send=send)
                upstream = attempt.response
                if stream and upstream.status == 200:
                    return await self._relay_stream(request, attempt, request_id)
                return await self._relay_whole(attempt, request_id)
        finally:
            self.admission.release()

    async def _relay_whole(
        self, attempt: Attempt[aiohttp.ClientResponse], request_id: str
    ) -> web.Response:
        upstream = attempt.response
        success = False
        try:
            try:
                data = await upstream.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise _mid_body_error(exc, self.backend) from exc
            success = outcome_of(upstream.status)
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}
            headers["X-Request-Id"] = request_id
            headers["X-SMG-Routed-Worker-Id"] = attempt.worker.url
            return web.Response(body=data, status=upstream.status, headers=headers)
        finally:
            upstream.release()
            self.runner.finish(attempt, success)

    async def _relay_stream(
        self, request: web.Request, attempt: Attempt[aiohttp.ClientResponse], request_id: str
    ) -> web.StreamResponse:
        upstream = attempt.response
        resp = web.StreamResponse(
            status=200,
            headers={
                **_SSE_HEADERS,
                "X-Request-Id": request_id,
                "X-SMG-Routed-Worker-Id": attempt.worker.url,
            },
        )
        success = False
        try:
            await resp.prepare(request)
            write = resp.write
            read = upstream.content.readany
            while True:
                try:
                    chunk = await read()
                except (TimeoutError, aiohttp.ClientError) as exc:
                    err = _mid_body_error(exc, self.backend)
                    log.warning("stream_upstream_failed", worker=attempt.worker.url, error=str(exc))
                    await write(sse_error(err))
                    break
                if not chunk:
                    success = True
                    break
                await write(chunk)  # a client that left raises here; `finally` drops upstream
            await resp.write_eof()
            return resp
        finally:
            if success:
                upstream.release()
            else:
                upstream.close()  # drop the connection: the worker sees the disconnect
            self.runner.finish(attempt, success)


def _mid_body_error(exc: BaseException, backend: HttpBackend) -> errors.ApiError:
    if isinstance(exc, asyncio.TimeoutError):
        return errors.upstream_timeout(backend.timeout_s)
    return errors.ApiError(502, "upstream_stream_error", f"The worker's response broke off: {exc}")
