"""Relaying an HTTP worker's answer to the client, whole or as a stream.

Streams are relayed chunk by chunk as they arrive (`write` waits for the client to drain: that is
the back-pressure) under the idle limit; a whole answer is read up to the size cap first. A
worker that dies, stalls or overflows ends the client's answer with an error (an error event once
a stream has started), never a hang, and counts as that worker's failure.

A client that leaves (aiohttp cancels the handler, or a write finds the connection gone) drops
the upstream connection at once and reports nothing about the worker: `finish(attempt, None)`.
Any other outcome is the worker's. Client-facing errors name no worker; the log does.
"""

from __future__ import annotations

import aiohttp
import structlog
from aiohttp import web

from smg import errors
from smg.flow.runner import Attempt, Runner, outcome_of
from smg.pipeline.backends.http import (
    DROP_RESPONSE,
    HttpBackend,
    IdleTimeout,
    ResponseTooLarge,
)

log = structlog.get_logger("smg.relay")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
ROUTED_WORKER_HEADER = "X-SMG-Routed-Worker-Id"  # the worker's id (a UUID), never its URL


def sse_error(err: errors.ApiError) -> bytes:
    return b"data: " + err.to_json() + b"\n\ndata: [DONE]\n\n"


def upstream_failure(
    backend: HttpBackend, exc: BaseException, request_id: str, worker_id: str
) -> errors.ApiError:
    """The client-facing error for a worker's answer that failed after its headers (`exc`:
    aiohttp's error, a timeout, `ResponseTooLarge`); the details go to the log."""
    log.warning(
        "upstream_answer_failed",
        request_id=request_id,
        worker_id=worker_id,
        error=f"{type(exc).__name__}: {exc}",
    )
    if isinstance(exc, ResponseTooLarge):
        return errors.upstream_too_large(exc.limit)
    if isinstance(exc, IdleTimeout) and backend.idle is not None:
        return errors.upstream_idle(backend.idle.idle_s)
    if isinstance(exc, TimeoutError):
        return errors.upstream_timeout(backend.timeout_s)
    return errors.upstream_broken()


UPSTREAM_FAILURES = (TimeoutError, aiohttp.ClientError, ResponseTooLarge)


def is_event_stream(upstream: aiohttp.ClientResponse) -> bool:
    """A streamed answer: 200 and SSE. Anything else (an error, or a worker that answers a
    stream request with one JSON document) is read whole, under the size cap."""
    return upstream.status == 200 and upstream.content_type == "text/event-stream"


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
        if stream and is_event_stream(attempt.response):
            return await self.stream(request, attempt, request_id)
        return await self.whole(attempt, request_id)  # size-capped, whatever the client asked

    async def whole(
        self, attempt: Attempt[aiohttp.ClientResponse], request_id: str
    ) -> web.Response:
        upstream = attempt.response
        success: bool | None = None  # stays None if the client leaves first
        read = False
        try:
            try:
                data = await self.backend.read_body(upstream)
            except UPSTREAM_FAILURES as exc:
                success = False
                raise upstream_failure(
                    self.backend, exc, request_id, attempt.worker.worker_id
                ) from None
            read = True
            success = outcome_of(upstream.status)
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in DROP_RESPONSE}
            headers["X-Request-Id"] = request_id
            headers[ROUTED_WORKER_HEADER] = attempt.worker.worker_id
            return web.Response(body=data, status=upstream.status, headers=headers)
        finally:
            if read:
                upstream.release()
            else:
                upstream.close()  # the rest of the body is unread: drop the connection
            self.runner.finish(attempt, success)

    async def stream(
        self,
        request: web.Request,
        attempt: Attempt[aiohttp.ClientResponse],
        request_id: str,
    ) -> web.StreamResponse:
        upstream = attempt.response
        worker_id = attempt.worker.worker_id
        resp = web.StreamResponse(
            status=200,
            headers={**SSE_HEADERS, "X-Request-Id": request_id, ROUTED_WORKER_HEADER: worker_id},
        )
        backend = self.backend
        watch = backend.watch(upstream)
        success: bool | None = None  # stays None if the client leaves (cancelled, or a write
        try:  # finds the connection gone): that says nothing about the worker
            try:
                await resp.prepare(request)
                write = resp.write
                read = upstream.content.readany
                while True:
                    try:
                        chunk = await read()
                    except UPSTREAM_FAILURES as exc:
                        success = False
                        err = upstream_failure(backend, exc, request_id, worker_id)
                        await write(sse_error(err))
                        break
                    if not chunk:
                        success = True
                        break
                    watch.progress += 1
                    watch.busy = True  # a slow client is not an idle worker
                    await write(chunk)
                    watch.busy = False
                await resp.write_eof()
            except ConnectionError:  # the client left; `finally` drops the upstream
                pass
            return resp
        finally:
            backend.unwatch(watch)
            if success is True:
                upstream.release()
            else:
                upstream.close()  # drop the connection: the worker sees the disconnect
            self.runner.finish(attempt, success)
