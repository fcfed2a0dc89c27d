"""Prefill/decode disaggregation over HTTP, SGLang style (the pure part is `smg.pipeline.pd`).

One request: pick a (prefill, decode) pair, add the bootstrap fields, send the same body to both
at once and relay the decode worker's answer as bytes; for a surface the gateway renders itself
(Responses: `chat.chat_renderer` decides, as for one worker) the decode's chat answer is read
back and rendered instead (chat.py). Both legs run in one `TaskGroup`: the prefill leg is a child
task that drains its answer; the decode leg is answered by the handler itself (legs.py: a failed
leg cancels the other, and the client gets a clean 502 or error event, a rendered stream its
renderer's failure events). No retries: the room is shared state between the two workers. Both
legs carry the gateway's engine id, never the client's; a client that leaves counts against
neither worker.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

import orjson
import structlog
from aiohttp import web

from smg import errors, tracing
from smg.core.snapshots import WorkerSnapshot
from smg.flow import chat
from smg.flow.legs import LegFailed, fail_client
from smg.flow.relay import (
    UPSTREAM_FAILURES,
    answer_headers,
    is_event_stream,
    relay_body,
)
from smg.flow.render import (
    PREFILL_WORKER_HEADER,
    ROUTED_WORKER_HEADER,
    SSE_HEADERS,
    ChatRenderer,
    RenderFactory,
)
from smg.flow.request import Request
from smg.flow.runner import Pairing, settle
from smg.pipeline import pd
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.backends.http import HttpBackend, ResponseTooLarge, UpstreamError
from smg.pipeline.engine_ids import with_engine_ids
from smg.pipeline.policies.base import RouteRequest

log = structlog.get_logger("smg.pd")

_DETAIL_BYTES = 300


async def _open(
    backend: HttpBackend,
    role: str,
    worker: WorkerSnapshot,
    path: str,
    data: bytes,
    headers: Mapping[str, str],
) -> H1Response:
    """Open one leg; a failure or a non-2xx answer raises `LegFailed`."""
    try:
        with tracing.stage(f"dispatch_{role}", "server.address", worker.url):
            resp = await backend.open(worker, path, data, headers)
    except UpstreamError as exc:
        raise LegFailed(role, exc.detail) from exc
    if not 200 <= resp.status < 300:
        try:
            body = await resp.content.read(_DETAIL_BYTES)
        except UPSTREAM_FAILURES:
            body = b""
        finally:
            resp.close()
        text = body.decode(errors="replace")
        raise LegFailed(role, f"{worker.url} answered {resp.status}: {text}")
    return resp


def _tags(pair: pd.PdPair, request_id: str) -> dict[str, str]:
    return {
        "X-Request-Id": request_id,
        ROUTED_WORKER_HEADER: pair.decode.worker_id,
        PREFILL_WORKER_HEADER: pair.prefill.worker_id,
    }


def _tag(out: web.StreamResponse, pair: pd.PdPair, request_id: str) -> None:
    out.headers.update(_tags(pair, request_id))


class HttpPd:
    def __init__(self, *, backend: HttpBackend, pairing: Pairing, rng: random.Random) -> None:
        self.backend = backend
        self.pairing = pairing
        self.rng = rng

    async def serve(
        self,
        client: web.Request,
        req: Request,
        route: RouteRequest,
        candidates: tuple[WorkerSnapshot, ...],
        render_with: RenderFactory,
    ) -> web.StreamResponse:
        pair = self.pairing.pick(candidates, route)
        room = pd.new_room(self.rng)
        legs = pd.inject_bootstrap(req.body, pair.prefill, room)
        data = orjson.dumps(with_engine_ids(legs, req.engine_id) or legs)
        renderer = chat.chat_renderer(render_with)
        pair.decode.counter.active += 1  # the prefill leg counts itself once its task runs
        out: web.StreamResponse | None = None
        answer: chat.ChatAnswer | None = None  # the decode's chat answer, read back
        failure: LegFailed | None = None
        refused: errors.ApiError | None = None  # a rendered whole answer that failed
        decode_success: bool | None = None  # None: unknown (cancelled, or the client left)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._prefill(pair.prefill, req, data))
                headers = self.backend.forward_headers(req.headers, pair.decode, req.engine_id)
                resp = await _open(self.backend, pd.DECODE, pair.decode, req.path, data, headers)
                if renderer is not None:
                    answer = self._chat(client, req, resp, pair, renderer)
                    try:
                        out = await answer.answer(req.stream)
                    finally:
                        decode_success = answer.success
                    if decode_success is False:  # a stream broke off, its failure events sent:
                        detail = f"{pair.decode.url}: its chat answer broke off"
                        raise LegFailed(pd.DECODE, detail)  # the prefill leg is cancelled
                else:
                    try:
                        if req.stream and is_event_stream(resp):
                            out = web.StreamResponse(status=resp.status, headers=SSE_HEADERS.copy())
                            _tag(out, pair, req.client_id)
                            decode_success = await self._stream(client, resp, out, pair.decode)
                        else:
                            out = await self._whole(resp, pair, req.client_id)
                            decode_success = True
                    finally:
                        if decode_success:
                            resp.release()
                        else:
                            resp.close()
        except* LegFailed as group:
            failure = next(e for e in group.exceptions if isinstance(e, LegFailed))
            if failure.role == pd.DECODE:
                decode_success = False
        except* errors.ApiError as group:  # raised outside the TaskGroup, below
            refused = next(e for e in group.exceptions if isinstance(e, errors.ApiError))
        finally:
            settle(pair.decode, decode_success)
        if failure is None:
            if refused is not None:
                raise refused
            assert out is not None
            return out
        log.warning(
            "pd_leg_failed",
            role=failure.role,
            detail=failure.detail,
            room=room,
            request_id=req.client_id,
            engine_id=req.engine_id,
        )
        if answer is not None and answer.out is not None:  # a rendered stream has begun
            await answer.fail(failure.api_error())
            return answer.out
        return await fail_client(out, failure.api_error(), ended=bool(decode_success))

    def _chat(
        self,
        client: web.Request,
        req: Request,
        resp: H1Response,
        pair: pd.PdPair,
        renderer: ChatRenderer,
    ) -> chat.ChatAnswer:
        return chat.ChatAnswer(
            self.backend,
            client,
            resp,
            renderer,
            request_id=req.client_id,
            worker_id=pair.decode.worker_id,
            headers=_tags(pair, req.client_id),
        )

    async def _prefill(self, worker: WorkerSnapshot, req: Request, data: bytes) -> None:
        """Send the prefill leg and drain its answer (its tokens are not the client's; at most
        `max_response_bytes` of them, under the idle limit). A task cancelled before it first
        runs never counts itself, so it is counted here."""
        worker.counter.active += 1
        success: bool | None = None
        backend = self.backend
        try:
            headers = backend.forward_headers(req.headers, worker, req.engine_id)
            resp = await _open(backend, pd.PREFILL, worker, req.path, data, headers)
            watch = backend.watch(resp)
            try:
                read, left = resp.content.readany, backend.max_response_bytes
                while chunk := await read():
                    watch.progress += 1
                    left -= len(chunk)
                    if left < 0:
                        raise ResponseTooLarge(backend.max_response_bytes)
            except UPSTREAM_FAILURES as exc:
                resp.close()
                raise LegFailed(pd.PREFILL, f"{worker.url}: answer broke off: {exc!r}") from exc
            except BaseException:
                resp.close()
                raise
            finally:
                backend.unwatch(watch)
            resp.release()
            success = True
        except LegFailed:
            success = False
            raise
        finally:
            settle(worker, success)  # cancelled (the decode leg failed): outcome unknown

    async def _whole(self, resp: H1Response, pair: pd.PdPair, request_id: str) -> web.Response:
        try:
            body = await self.backend.read_body(resp)
        except UPSTREAM_FAILURES as exc:
            raise LegFailed(pd.DECODE, f"{pair.decode.url}: answer broke off: {exc!r}") from exc
        out = web.Response(body=body, status=resp.status, headers=answer_headers(resp))
        _tag(out, pair, request_id)
        return out

    async def _stream(
        self,
        client: web.Request,
        resp: H1Response,
        out: web.StreamResponse,
        decode: WorkerSnapshot,
    ) -> bool | None:
        """Relay the decode stream; True when it ended cleanly, None when the client left
        (a write found it gone; a cancellation leaves the caller's None as it is)."""
        backend = self.backend
        watch = backend.watch(resp)
        try:
            await out.prepare(client)
            with tracing.stage("stream"):
                failure, tail = await relay_body(resp, client, out, watch, first_token=False)
            if failure is not None:
                detail = f"{decode.url}: answer broke off: {failure!r}"
                raise LegFailed(pd.DECODE, detail) from failure
            await out.write_eof(tail)
        except ConnectionError:
            return None
        finally:
            backend.unwatch(watch)
        return True
