"""Prefill/decode disaggregation over HTTP, SGLang style (the pure part is `smg.pipeline.pd`).

One request: pick a (prefill, decode) pair, add the bootstrap fields, send the same body to both
at once and relay the decode worker's answer. Both legs run in one `TaskGroup`: the prefill leg
is a child task that drains its answer; the decode leg is relayed by the handler itself. A leg
that fails (unreachable, non-2xx, broken body) raises `LegFailed`, which cancels the other leg;
the client gets a 502 (`pd_prefill_failed` / `pd_decode_failed`, naming no worker: the details
go to the log), or an error event if its stream has already started. No retries: the room is
shared state between the two workers. Both legs carry the gateway's engine id, never the
client's; a client that leaves counts against neither worker.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web

from smg import errors
from smg.api.relay import (
    ROUTED_WORKER_HEADER,
    SSE_HEADERS,
    UPSTREAM_FAILURES,
    is_event_stream,
    sse_error,
)
from smg.clock import Clock
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline import pd
from smg.pipeline.backends.http import DROP_RESPONSE, HttpBackend, ResponseTooLarge, UpstreamError
from smg.pipeline.engine_ids import with_engine_ids
from smg.pipeline.policies.base import Policy, RouteRequest
from smg.pipeline.runner import RunnerMetrics, report

log = structlog.get_logger("smg.pd")

_DETAIL_BYTES = 300


class LegFailed(Exception):
    """A PD leg failed; `detail` names the worker and the cause (for the log only), `public`
    is what the client may read besides the role (never an address)."""

    def __init__(self, role: str, detail: str, public: str = "") -> None:
        super().__init__(f"{role}: {detail}")
        self.role = role
        self.detail = detail
        self.public = public

    def api_error(self) -> errors.ApiError:
        extra = f": {self.public}" if self.public else ""
        return errors.ApiError(
            502,
            f"pd_{self.role}_failed",
            f"The {self.role} worker failed to answer this request{extra}",
            type="server_error",
        )


def leg_done(worker: WorkerSnapshot, success: bool | None) -> None:
    counter = worker.counter
    counter.active -= 1
    counter.processed += 1
    if success is not None:
        report(worker, success)


async def _open(
    backend: HttpBackend,
    role: str,
    worker: WorkerSnapshot,
    path: str,
    data: bytes,
    headers: Mapping[str, str],
) -> aiohttp.ClientResponse:
    """Open one leg; a failure or a non-2xx answer raises `LegFailed`."""
    try:
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


def _tag(out: web.StreamResponse, pair: pd.PdPair, request_id: str) -> None:
    out.headers["X-Request-Id"] = request_id
    out.headers[ROUTED_WORKER_HEADER] = pair.decode.worker_id
    out.headers["X-SMG-Prefill-Worker-Id"] = pair.prefill.worker_id


class PdRoutes:
    def __init__(
        self,
        *,
        backend: HttpBackend,
        prefill_policy: Policy,
        decode_policy: Policy,
        clock: Clock,
        rng: random.Random,
        metrics: RunnerMetrics,
    ) -> None:
        self.backend = backend
        self.prefill_policy = prefill_policy
        self.decode_policy = decode_policy
        self.clock = clock
        self.rng = rng
        self.metrics = metrics

    async def serve(
        self,
        request: web.Request,
        *,
        path: str,
        body: dict[str, Any],
        candidates: tuple[WorkerSnapshot, ...],
        route: RouteRequest,
        stream: bool,
        request_id: str,
        engine_id: str,
    ) -> web.StreamResponse:
        pair = pd.select_pair(
            candidates,
            route,
            prefill_policy=self.prefill_policy,
            decode_policy=self.decode_policy,
            now=self.clock.now(),
        )
        room = pd.new_room(self.rng)
        legs = pd.inject_bootstrap(body, pair.prefill, room)
        data = orjson.dumps(with_engine_ids(legs, engine_id) or legs)
        model = route.model or ""
        for w in (pair.prefill, pair.decode):
            self.metrics.selected(w, model)
        pair.decode.counter.active += 1  # the prefill leg counts itself once its task runs
        headers = request.headers
        out: web.StreamResponse | None = None
        failure: LegFailed | None = None
        decode_success: bool | None = None  # None: unknown (cancelled, or the client left)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._prefill(pair.prefill, path, data, headers, engine_id))
                decode_headers = self.backend.forward_headers(headers, pair.decode, engine_id)
                resp = await _open(self.backend, pd.DECODE, pair.decode, path, data, decode_headers)
                try:
                    if stream and is_event_stream(resp):
                        out = web.StreamResponse(status=resp.status, headers=SSE_HEADERS.copy())
                        _tag(out, pair, request_id)
                        decode_success = await self._stream(request, resp, out, pair.decode)
                    else:
                        out = await self._whole(resp, pair, request_id)
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
        finally:
            leg_done(pair.decode, decode_success)
        if failure is None:
            assert out is not None
            return out
        log.warning(
            "pd_leg_failed",
            role=failure.role,
            detail=failure.detail,
            room=room,
            request_id=request_id,
            engine_id=engine_id,
        )
        return await fail_client(out, failure.api_error(), ended=bool(decode_success))

    async def _prefill(
        self,
        worker: WorkerSnapshot,
        path: str,
        data: bytes,
        headers: Mapping[str, str],
        engine_id: str,
    ) -> None:
        """Send the prefill leg and drain its answer (its tokens are not the client's; at most
        `max_response_bytes` of them, under the idle limit). A task cancelled before it first
        runs never counts itself, so it is counted here."""
        worker.counter.active += 1
        success: bool | None = None
        backend = self.backend
        try:
            prefill_headers = backend.forward_headers(headers, worker, engine_id)
            resp = await _open(backend, pd.PREFILL, worker, path, data, prefill_headers)
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
            leg_done(worker, success)  # cancelled (the decode leg failed): outcome unknown

    async def _whole(
        self, resp: aiohttp.ClientResponse, pair: pd.PdPair, request_id: str
    ) -> web.Response:
        try:
            body = await self.backend.read_body(resp)
        except UPSTREAM_FAILURES as exc:
            raise LegFailed(pd.DECODE, f"{pair.decode.url}: answer broke off: {exc!r}") from exc
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in DROP_RESPONSE}
        out = web.Response(body=body, status=resp.status, headers=headers)
        _tag(out, pair, request_id)
        return out

    async def _stream(
        self,
        request: web.Request,
        resp: aiohttp.ClientResponse,
        out: web.StreamResponse,
        decode: WorkerSnapshot,
    ) -> bool | None:
        """Relay the decode stream; True when it ended cleanly, None when the client left
        (a write found it gone; a cancellation leaves the caller's None as it is)."""
        backend = self.backend
        watch = backend.watch(resp)
        try:
            await out.prepare(request)
            read = resp.content.readany
            while True:
                try:
                    chunk = await read()
                except UPSTREAM_FAILURES as exc:
                    detail = f"{decode.url}: answer broke off: {exc!r}"
                    raise LegFailed(pd.DECODE, detail) from exc
                if not chunk:
                    break
                watch.progress += 1
                watch.busy = True  # a slow client is not an idle worker
                await out.write(chunk)
                watch.busy = False
            await out.write_eof()
        except ConnectionError:
            return None
        finally:
            backend.unwatch(watch)
        return True


async def fail_client(
    out: web.StreamResponse | None, err: errors.ApiError, *, ended: bool
) -> web.StreamResponse:
    """Tell the client a leg failed: raise `err` (an error response) before its stream started;
    after, an error event on the stream unless it already `ended` whole. A client gone by then
    gets nothing."""
    if out is None or not out.prepared:
        raise err
    if not ended:
        try:
            await out.write(sse_error(err))
            await out.write_eof()
        except ConnectionError:
            pass
    return out
