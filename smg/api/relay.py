"""Relaying an HTTP worker's answer to the client, whole or as a stream.

Streams are relayed chunk by chunk as they arrive (`write` waits for the client to drain: that is
the back-pressure); a client that disconnects cancels the handler (aiohttp handler cancellation),
which drops the upstream connection at once. A worker that dies mid-stream ends the client's
stream with an error event, never a hang.
"""

from __future__ import annotations

import asyncio

import aiohttp
import structlog
from aiohttp import web

from smg import errors
from smg.pipeline.backends.http import DROP_RESPONSE, HttpBackend
from smg.pipeline.runner import Attempt, Runner, outcome_of

log = structlog.get_logger("smg.relay")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def sse_error(err: errors.ApiError) -> bytes:
    return b"data: " + err.to_json() + b"\n\ndata: [DONE]\n\n"


class HttpRelay:
    def __init__(self, runner: Runner, backend: HttpBackend) -> None:
        self.runner = runner
        self.backend = backend

    async def answer(
        self,
        request: web.Request,
        attempt: Attempt[aiohttp.ClientResponse],
        request_id: str,
        stream: bool,
    ) -> web.StreamResponse:
        if stream and attempt.response.status == 200:
            return await self.stream(request, attempt, request_id)
        return await self.whole(attempt, request_id)

    async def whole(
        self, attempt: Attempt[aiohttp.ClientResponse], request_id: str
    ) -> web.Response:
        upstream = attempt.response
        success = False
        try:
            try:
                data = await upstream.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise self._mid_body_error(exc) from exc
            success = outcome_of(upstream.status)
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}
            headers["X-Request-Id"] = request_id
            headers["X-SMG-Routed-Worker-Id"] = attempt.worker.url
            return web.Response(body=data, status=upstream.status, headers=headers)
        finally:
            upstream.release()
            self.runner.finish(attempt, success)

    async def stream(
        self,
        request: web.Request,
        attempt: Attempt[aiohttp.ClientResponse],
        request_id: str,
    ) -> web.StreamResponse:
        upstream = attempt.response
        resp = web.StreamResponse(
            status=200,
            headers={
                **SSE_HEADERS,
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
                    log.warning("stream_upstream_failed", worker=attempt.worker.url, error=str(exc))
                    await write(sse_error(self._mid_body_error(exc)))
                    break
                if not chunk:
                    success = True
                    break
                try:
                    await write(chunk)
                except ConnectionResetError:  # the client left; `finally` drops the upstream
                    return resp
            await resp.write_eof()
            return resp
        finally:
            if success is True:
                upstream.release()
            else:
                upstream.close()  # drop the connection: the worker sees the disconnect
            self.runner.finish(attempt, success)

    def _mid_body_error(self, exc: BaseException) -> errors.ApiError:
        if isinstance(exc, asyncio.TimeoutError):
            return errors.upstream_timeout(self.backend.timeout_s)
        return errors.ApiError(
            502, "upstream_stream_error", f"The worker's response broke off: {exc}"
        )
