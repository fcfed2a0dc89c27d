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

The attempt is settled once, as in the relay (None when the client left first).
"""

from __future__ import annotations

import aiohttp
import orjson
import structlog
from aiohttp import web

from smg import errors
from smg.flow.relay import UPSTREAM_FAILURES, HttpRelay, is_event_stream, pump, upstream_failure
from smg.flow.render import ROUTED_WORKER_HEADER, ChatRenderer, sse_response
from smg.flow.runner import Attempt
from smg.pipeline.chat_answer import (
    ChatAnswerError,
    SseReader,
    chunk_step,
    payload_json,
    whole_step,
)

log = structlog.get_logger("smg.relay")


class ChatAnswer:
    """One HTTP worker's chat answer (an opened attempt) on its way to `renderer`."""

    __slots__ = ("attempt", "client", "relay", "renderer", "request_id")

    def __init__(
        self,
        relay: HttpRelay,
        client: web.Request,
        attempt: Attempt[aiohttp.ClientResponse],
        request_id: str,
        renderer: ChatRenderer,
    ) -> None:
        self.relay = relay
        self.client = client
        self.attempt = attempt
        self.request_id = request_id
        self.renderer = renderer

    async def answer(self, stream: bool) -> web.StreamResponse:
        upstream = self.attempt.response
        if upstream.status != 200:  # the worker's error, as it said it (OpenAI's shape)
            return await self.relay.whole(self.attempt, self.request_id)
        if stream and is_event_stream(upstream):
            return await self._stream()
        return await self._whole(stream)

    def _headers(self) -> dict[str, str]:
        return {
            "X-Request-Id": self.request_id,
            ROUTED_WORKER_HEADER: self.attempt.worker.worker_id,
        }

    def _not_chat(self, exc: Exception) -> errors.ApiError:
        log.warning(
            "upstream_answer_not_chat",
            request_id=self.request_id,
            worker_id=self.attempt.worker.worker_id,
            error=str(exc),
        )
        return errors.upstream_not_chat()

    async def _whole(self, stream: bool) -> web.StreamResponse:
        attempt, renderer = self.attempt, self.renderer
        upstream, worker_id = attempt.response, attempt.worker.worker_id
        success: bool | None = None  # stays None if the client leaves first
        read = False
        try:
            try:
                data = await self.relay.backend.read_body(upstream)
            except UPSTREAM_FAILURES as exc:
                success = False
                raise upstream_failure(
                    self.relay.backend, exc, self.request_id, worker_id
                ) from None
            read = True
            try:
                step = whole_step(orjson.loads(data))
            except (orjson.JSONDecodeError, ChatAnswerError) as exc:
                success = False
                raise self._not_chat(exc) from None
            success = True
            if stream:  # a stream asked, one document answered: the same events, at once
                frames = renderer.chat_frames(step) + renderer.closing_frames()
                resp = sse_response(renderer, self._headers())
                try:
                    await resp.prepare(self.client)
                    await resp.write_eof(b"".join(frames))
                except ConnectionError:
                    pass
                return resp
            renderer.collect_chat(step)
            body = renderer.whole()
            assert body is not None  # only an engine's failure has nothing to show
            return web.Response(body=body, content_type="application/json", headers=self._headers())
        finally:
            if read:
                upstream.release()
            else:
                upstream.close()
            self.relay.runner.finish(attempt, success)

    async def _stream(self) -> web.StreamResponse:
        attempt, renderer = self.attempt, self.renderer
        resp = sse_response(renderer, self._headers())
        backend = self.relay.backend
        watch = backend.watch(attempt.response)
        reader = SseReader()

        async def write(chunk: bytes) -> None:
            frames: list[bytes] = []
            try:
                for payload in reader.feed(chunk):
                    frames += renderer.chat_frames(chunk_step(payload_json(payload)))
            finally:  # what came before a bad payload is shown
                if frames:
                    await resp.write(b"".join(frames))

        success: bool | None = None  # stays None if the client leaves first
        try:
            try:
                await resp.prepare(self.client)
                try:
                    failure = await pump(attempt.response, write, watch)
                except ChatAnswerError as exc:
                    success = False
                    err = self._not_chat(exc)
                else:
                    success = failure is None
                    if failure is not None:
                        worker_id = attempt.worker.worker_id
                        err = upstream_failure(backend, failure, self.request_id, worker_id)
                last = renderer.closing_frames() if success else renderer.failure_frames(err)
                await resp.write_eof(b"".join(last))
            except ConnectionError:  # the client left; `finally` drops the upstream
                pass
            return resp
        finally:
            self.relay.settle_stream(attempt, watch, success)
