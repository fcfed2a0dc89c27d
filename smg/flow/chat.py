"""An HTTP worker's chat answer read back for a surface the gateway renders itself.

A surface without a worker protocol of its own (Responses) reaches an HTTP worker as a chat
completions request (its edge built the body); the worker's answer is then not relayed as
bytes but read back (smg.pipeline.chat_answer: `ChatStep`s) and handed to the surface's
`ChatRenderer`, which answers in the surface's shape:

* a whole answer is read under the relay's size cap and idle limit, then rendered as one body;
* a stream is read chunk by chunk through the relay's `pump` (idle limit, back-pressure: one
  write per chunk of the worker's), each chunk's events written as they come, the closing
  events at the end; a worker that asked for a stream but answered one JSON document is rendered
  as the same event sequence;
* a worker's error status (4xx/5xx) is relayed as it is: the worker speaks OpenAI's error shape;
* an answer that is not a chat completion (bad JSON, wrong shape) is the worker's failure: 502
  `upstream_bad_answer` (or the renderer's failure events once a stream has begun); what was wrong
  goes to the log.

One place decides whether an HTTP worker's answer is rendered or relayed: `chat_renderer`
(a `ChatRenderFactory` makes one, any other surface is relayed as bytes); the single-worker plan
and the decode leg of an HTTP PD pair both ask it. `ChatAnswer` reads one worker answer (status
200; an error status is the caller's to relay) and leaves its outcome in `success` (None when the
client left first or the answer was cancelled) for the caller to settle once.
"""

from __future__ import annotations

import time

import orjson
import structlog
from aiohttp import web

from smg import errors
from smg.flow.relay import UPSTREAM_FAILURES, is_event_stream, pump, upstream_failure
from smg.flow.render import ChatRenderer, RenderFactory, sse_response
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.chat_answer import (
    ChatAnswerError,
    SseReader,
    chunk_step,
    payload_json,
    whole_step,
)

log = structlog.get_logger("smg.relay")


def chat_renderer(render_with: RenderFactory) -> ChatRenderer | None:
    """The renderer for an HTTP worker's chat answer when the surface is one the gateway renders
    itself (Responses); None when the worker's answer is relayed as bytes."""
    # getattr, not isinstance: a runtime-checkable Protocol's isinstance walks its members (4 %
    # of a relayed request's CPU, py-spy)
    for_chat = getattr(render_with, "for_chat", None)
    if for_chat is None:
        return None
    renderer: ChatRenderer = for_chat(int(time.time()))
    return renderer


class ChatAnswer:
    """One HTTP worker's chat answer (its response, status 200) on its way to `renderer`."""

    __slots__ = (
        "backend",
        "client",
        "ended",
        "headers",
        "out",
        "renderer",
        "request_id",
        "success",
        "upstream",
        "worker_id",
    )

    def __init__(
        self,
        backend: HttpBackend,
        client: web.Request,
        upstream: H1Response,
        renderer: ChatRenderer,
        *,
        request_id: str,
        worker_id: str,
        headers: dict[str, str],
    ) -> None:
        self.backend = backend
        self.client = client
        self.upstream = upstream
        self.renderer = renderer
        self.request_id = request_id
        self.worker_id = worker_id
        self.headers = headers  # the client's answer's own (request id, worker ids)
        self.success: bool | None = None  # the worker's outcome; None: unknown (client left)
        self.out: web.StreamResponse | None = None  # the client's stream, once prepared
        self.ended = False  # the client's stream has its last events

    async def answer(self, stream: bool) -> web.StreamResponse:
        if stream and is_event_stream(self.upstream):
            return await self._stream()
        return await self._whole(stream)

    async def fail(self, err: errors.ApiError) -> None:
        """End a stream already begun with the renderer's failure events (the answer was cut
        off from outside: the other leg of a PD pair failed). A client gone gets nothing."""
        out = self.out
        if out is None or self.ended:
            return
        self.ended = True
        try:
            await out.write_eof(b"".join(self.renderer.failure_frames(err)))
        except ConnectionError:
            pass

    def _not_chat(self, exc: Exception) -> errors.ApiError:
        log.warning(
            "upstream_answer_not_chat",
            request_id=self.request_id,
            worker_id=self.worker_id,
            error=str(exc),
        )
        return errors.upstream_not_chat()

    async def _whole(self, stream: bool) -> web.StreamResponse:
        renderer, upstream = self.renderer, self.upstream
        read = False
        try:
            try:
                data = await self.backend.read_body(upstream)
            except UPSTREAM_FAILURES as exc:
                self.success = False
                raise upstream_failure(self.backend, exc, self.request_id, self.worker_id) from None
            read = True
            try:
                step = whole_step(orjson.loads(data))
            except (orjson.JSONDecodeError, ChatAnswerError) as exc:
                self.success = False
                raise self._not_chat(exc) from None
            self.success = True
            if stream:  # a stream asked, one document answered: the same events, at once
                frames = renderer.chat_frames(step) + renderer.closing_frames()
                resp = sse_response(renderer, self.headers)
                try:
                    await resp.prepare(self.client)
                    self.ended = True
                    await resp.write_eof(b"".join(frames))
                except ConnectionError:
                    pass
                return resp
            renderer.collect_chat(step)
            body = renderer.whole()
            assert body is not None  # only an engine's failure has nothing to show
            return web.Response(body=body, content_type="application/json", headers=self.headers)
        finally:
            if read:
                upstream.release()
            else:
                upstream.close()

    async def _stream(self) -> web.StreamResponse:
        renderer, upstream = self.renderer, self.upstream
        resp = sse_response(renderer, self.headers)
        backend = self.backend
        watch = backend.watch(upstream)
        reader = SseReader()

        async def write(chunk: bytes) -> None:
            frames: list[bytes] = []
            try:
                for payload in reader.feed(chunk):
                    frames += renderer.chat_frames(chunk_step(payload_json(payload)))
            finally:  # what came before a bad payload is shown
                if frames:
                    await resp.write(b"".join(frames))

        try:
            try:
                await resp.prepare(self.client)
                self.out = resp
                try:
                    failure = await pump(upstream, write, watch)
                except ChatAnswerError as exc:
                    self.success = False
                    err = self._not_chat(exc)
                else:
                    self.success = failure is None
                    if failure is not None:
                        err = upstream_failure(backend, failure, self.request_id, self.worker_id)
                last = renderer.closing_frames() if self.success else renderer.failure_frames(err)
                self.ended = True
                await resp.write_eof(b"".join(last))
            except ConnectionError:  # the client left; `finally` drops the upstream
                pass
            return resp
        finally:
            backend.unwatch(watch)
            if self.success is True:
                upstream.release()
            else:
                upstream.close()  # the worker sees the disconnect
