"""Prefill/decode disaggregation over HTTP, SGLang style (the pure part is `smg.pipeline.pd`).

One request: pick a (prefill, decode) pair, add the bootstrap fields, send the same body to both
at once and relay the decode worker's answer. Both legs run in one `TaskGroup`: the prefill leg
is a child task that drains its answer; the decode leg is relayed by the handler itself. A leg
that fails (unreachable, non-2xx, broken body) raises `LegFailed`, which cancels the other leg;
the client gets a 502 (`pd_prefill_failed` / `pd_decode_failed`), or an error event if its stream
has already started. No retries: the room is shared state between the two workers.
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
from smg.actors.snapshots import WorkerSnapshot
from smg.api.relay import SSE_HEADERS, sse_error
from smg.clock import Clock
from smg.pipeline import pd
from smg.pipeline.backends.http import DROP_RESPONSE, HttpBackend, UpstreamError, forward_headers
from smg.pipeline.policies.base import Policy, RouteRequest
from smg.pipeline.runner import RunnerMetrics, report

log = structlog.get_logger("smg.pd")

_DETAIL_BYTES = 300


class LegFailed(Exception):
    def __init__(self, role: str, detail: str) -> None:
        super().__init__(f"{role}: {detail}")
        self.role = role
        self.detail = detail

    def api_error(self) -> errors.ApiError:
        return errors.ApiError(
            502,
            f"pd_{self.role}_failed",
            f"The {self.role} worker failed: {self.detail}",
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
        except (TimeoutError, aiohttp.ClientError):
            body = b""
        finally:
            resp.close()
        text = body.decode(errors="replace")
        raise LegFailed(role, f"{worker.url} answered {resp.status}: {text}")
    return resp


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
    ) -> web.StreamResponse:
        pair = pd.select_pair(
            candidates,
            route,
            prefill_policy=self.prefill_policy,
            decode_policy=self.decode_policy,
            now=self.clock.now(),
        )
        room = pd.new_room(self.rng)
        data = orjson.dumps(pd.inject_bootstrap(body, pair.prefill, room))
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
                tg.create_task(self._prefill(pair.prefill, path, data, headers, request_id))
                decode_headers = forward_headers(headers, pair.decode, request_id)
                resp = await _open(self.backend, pd.DECODE, pair.decode, path, data, decode_headers)
                try:
                    if stream:
                        out = web.StreamResponse(status=resp.status, headers=SSE_HEADERS.copy())
                        self._tag(out, pair, request_id)
                        decode_success = await self._stream(request, resp, out)
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
        log.warning("pd_leg_failed", role=failure.role, detail=failure.detail, room=room)
        err = failure.api_error()
        if out is not None and out.prepared:  # the client's stream has started
            if decode_success:  # ... and ended whole: nothing left to tell the client
                return out
            try:
                await out.write(sse_error(err))
                await out.write_eof()
            except ConnectionResetError:
                pass
            return out
        raise err

    async def _prefill(
        self,
        worker: WorkerSnapshot,
        path: str,
        data: bytes,
        headers: Mapping[str, str],
        request_id: str,
    ) -> None:
        """Send the prefill leg and drain its answer (its tokens are not the client's).
        A task cancelled before it first runs never counts itself, so it is counted here."""
        worker.counter.active += 1
        success: bool | None = None
        try:
            prefill_headers = forward_headers(headers, worker, request_id)
            resp = await _open(self.backend, pd.PREFILL, worker, path, data, prefill_headers)
            try:
                while await resp.content.readany():
                    pass
            except (TimeoutError, aiohttp.ClientError) as exc:
                resp.close()
                raise LegFailed(pd.PREFILL, f"{worker.url}: answer broke off: {exc}") from exc
            resp.release()
            success = True
        except LegFailed:
            success = False
            raise
        finally:
            leg_done(worker, success)  # cancelled (the decode leg failed): outcome unknown

    @staticmethod
    def _tag(out: web.StreamResponse, pair: pd.PdPair, request_id: str) -> None:
        out.headers["X-Request-Id"] = request_id
        out.headers["X-SMG-Routed-Worker-Id"] = pair.decode.url
        out.headers["X-SMG-Prefill-Worker-Id"] = pair.prefill.url

    async def _whole(
        self, resp: aiohttp.ClientResponse, pair: pd.PdPair, request_id: str
    ) -> web.Response:
        try:
            body = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise LegFailed(pd.DECODE, f"{pair.decode.url}: answer broke off: {exc}") from exc
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in DROP_RESPONSE}
        out = web.Response(body=body, status=resp.status, headers=headers)
        self._tag(out, pair, request_id)
        return out

    async def _stream(
        self, request: web.Request, resp: aiohttp.ClientResponse, out: web.StreamResponse
    ) -> bool | None:
        """Relay the decode stream; True when it ended cleanly, None when the client left."""
        await out.prepare(request)
        read = resp.content.readany
        while True:
            try:
                chunk = await read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise LegFailed(pd.DECODE, f"answer broke off: {exc}") from exc
            if not chunk:
                break
            try:
                await out.write(chunk)
            except ConnectionResetError:
                return None
        await out.write_eof()
        return True
