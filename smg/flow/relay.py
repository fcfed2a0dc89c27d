"""An HTTP worker's answer to the client, relayed as bytes, whole or as a stream.

The worker already speaks the client's protocol (OpenAI, or SGLang's /generate), so nothing is
parsed and re-serialised: its chunks are the events, relayed as they arrive (`write` waits for
the client to drain: that is the back-pressure) under the idle limit; a whole answer is read up
to the size cap first. A worker that dies, stalls or overflows ends the client's answer with an
error (an error event once a stream has started), never a hang, and counts as that worker's
failure.

A client that leaves (aiohttp cancels the handler, or a write finds the connection gone) drops
the upstream connection at once and reports nothing about the worker: `finish(attempt, None)`.
Any other outcome is the worker's. Client-facing errors name no worker; the log does.

A stream's body goes through a `Pipe` (pipe.py: callbacks from the upstream connection to the
client's transport, the task asleep until the end) when both ends can (the lean edge's writer,
the lean client's body), else through `pump` (a coroutine loop, one await per read).
`relay_body` chooses; both this relay and the PD decode leg over HTTP (pd_http.py) use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from smg import errors, tracing
from smg.core.idle import Watch
from smg.flow.answer import Answer, Whole
from smg.flow.pipe import Pipe
from smg.flow.render import ROUTED_WORKER_HEADER, SSE_HEADERS
from smg.flow.runner import Attempt, Runner, outcome_of
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.backends.http import (
    DROP_RESPONSE,
    HttpBackend,
    ResponseTooLarge,
)
from smg.pipeline.providers.base import ProviderStreamError

log = structlog.get_logger("smg.relay")

# a provider worker's stream that broke off or carried an error event: ProviderStreamError
UPSTREAM_FAILURES = (TimeoutError, aiohttp.ClientError, ResponseTooLarge, ProviderStreamError)


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
    return backend.answer_failure(exc)


def is_event_stream(upstream: H1Response) -> bool:
    """A streamed answer: 200 and SSE. Anything else (an error, or a worker that answers a
    stream request with one JSON document) is read whole, under the size cap."""
    return upstream.status == 200 and upstream.content_type == "text/event-stream"


def answer_headers(upstream: H1Response) -> dict[str, str]:
    """The worker's response headers the client may see (no hop-by-hop ones, not its id)."""
    out = {}
    for k, v in upstream.headers.items():  # a loop, not a comprehension: no frame a request
        if k.lower() not in DROP_RESPONSE:
            out[k] = v
    return out


async def pump(
    upstream: H1Response, write: Callable[[bytes], Awaitable[None]], watch: Watch
) -> BaseException | None:
    """Relay `upstream`'s body chunk by chunk to `write` until it ends (None) or fails (the
    failure, one of `UPSTREAM_FAILURES`, returned). A client gone raises `ConnectionError` from
    `write`; time spent writing to a slow client never counts as the worker's silence."""
    read = upstream.content.readany
    while True:
        try:
            chunk = await read()
        except UPSTREAM_FAILURES as exc:
            return exc
        if not chunk:
            return None
        watch.progress += 1
        watch.busy = True  # a slow client is not an idle worker
        await write(chunk)
        watch.busy = False


async def relay_body(
    upstream: H1Response,
    client: web.Request,
    resp: web.StreamResponse,
    watch: Watch,
    *,
    first_token: bool = True,
) -> tuple[BaseException | None, bytes]:
    """`upstream`'s body to the prepared `resp`, as `pump` (same outcomes), through a `Pipe`
    when the client's writer and the upstream body both offer the no-wait calls. With tracing
    on and `first_token`, the first chunk records the time to the first token. Also returns
    the body's last bytes when they are not written yet (the pipe's `tail`): the caller's
    `write_eof` takes them, with the end, in one write."""
    first_token = first_token and tracing.enabled()
    writer = getattr(client, "writer", None)
    content = upstream.content
    if hasattr(writer, "write_nowait") and hasattr(content, "pipe"):
        pipe = Pipe(content, writer, watch, first_token)  # type: ignore[arg-type]
        failure = await pipe.run()
        if failure is not None and not isinstance(failure, UPSTREAM_FAILURES):
            raise failure
        return failure, pipe.tail
    write: Callable[[bytes], Awaitable[None]] = resp.write
    if first_token:
        write = tracing.on_first_write(write)
    return await pump(upstream, write, watch), b""


class HttpRelay:
    def __init__(self, runner: Runner, backend: HttpBackend) -> None:
        self.runner = runner
        self.backend = backend

    def answer(
        self,
        client: web.Request,
        attempt: Attempt[H1Response],
        request_id: str,
        stream: bool,
    ) -> Coroutine[Any, Any, Answer]:
        """The answer's relay, to await (no frame of its own on the request's path)."""
        if stream and is_event_stream(attempt.response):
            return self.stream(client, attempt, request_id)
        return self.whole(attempt, request_id)  # size-capped, whatever the client asked

    async def whole(self, attempt: Attempt[H1Response], request_id: str) -> Whole:
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
            headers = answer_headers(upstream)
            headers["X-Request-Id"] = request_id
            headers[ROUTED_WORKER_HEADER] = attempt.worker.worker_id
            return Whole(data, headers, upstream.status, None)  # the worker's own Content-Type
        finally:
            if read:
                upstream.release()
            else:
                upstream.close()  # the rest of the body is unread: drop the connection
            self.runner.finish(attempt, success)

    async def stream(
        self,
        client: web.Request,
        attempt: Attempt[H1Response],
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
                await resp.prepare(client)
                failure, tail = await relay_body(upstream, client, resp, watch)
                success = failure is None
                if failure is not None:
                    err = upstream_failure(backend, failure, request_id, worker_id)
                    tail += sse_error(err)
                await resp.write_eof(tail)
            except ConnectionError:  # the client left; `finally` drops the upstream
                pass
            return resp
        finally:
            self.settle_stream(attempt, watch, success)

    def settle_stream(
        self, attempt: Attempt[H1Response], watch: Watch, success: bool | None
    ) -> None:
        """A streamed answer has ended: its watch released, its upstream connection kept only
        when it ended well (else dropped: the worker sees the disconnect), its attempt settled."""
        self.backend.unwatch(watch)
        if success is True:
            attempt.response.release()
        else:
            attempt.response.close()
        self.runner.finish(attempt, success)
