"""The hot inference routes served on the lean edge (smg/edge) instead of aiohttp's server.

`POST /v1/chat/completions` and `POST /v1/completions` are answered here; every other request
on the port is handed to the aiohttp application with its connection (smg/edge's hand-over), so
the routes and middlewares there stay as they are. Per request this does what the aiohttp
middlewares and `OpenAIRoutes` do, in the same order and with the same helpers: the request id
(the client's or a new one) bound into the log context and a server span when tracing is on,
the auth gate (415 for a body that is not JSON, 401/403), the drain's 503, the cluster rate
limit, the body read under the listener's body budget, the OpenAI checks, the flow, the answer
(CORS headers for an allowed origin, `X-Request-Id`), errors in OpenAI's shape, 499 for a
client that left, and the request's metrics.

Why: aiohttp's server alone costs about what the Rust gateway spends on a whole request
(DEVELOPERS.md, "The lean HTTP/1.1 edge").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from aiohttp import web
from multidict import CIMultiDict

from smg import errors, tracing
from smg.api import requests as rq
from smg.api.auth import AuthGate
from smg.api.connection_guard import ConnectionGuard
from smg.api.edge_answers import EdgeClient, client_headers, whole_body_reply, whole_reply
from smg.api.middleware import error_response, traced_route
from smg.clock import RunningLoop
from smg.core.auth import JwtCheck, RouteClass, classify
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply
from smg.flow.admission import Admission
from smg.flow.answer import Whole, as_response
from smg.flow.request import Kind
from smg.flow.serve import Flow
from smg.metrics import Metrics
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.output import openai_renderer

log = structlog.get_logger("smg.gateway")
# structlog's context variable for `request_id` (bind_contextvars makes one per key, and its
# token names it): set and reset directly, without building bind's and reset's dicts a request
_RID: ContextVar[Any] = structlog.contextvars.bind_contextvars(request_id=None)["request_id"].var
structlog.contextvars.unbind_contextvars("request_id")


@dataclass(frozen=True, slots=True)
class _Route:
    path: str
    kind: Kind
    check: Callable[[dict[str, Any]], SamplingParams | None]
    id_prefix: str
    cls: RouteClass


def _route(path: str, kind: Kind, check: Any, id_prefix: str) -> _Route:
    return _Route(path, kind, check, id_prefix, classify(path))


ROUTES = {
    b"/v1/chat/completions": _route("/v1/chat/completions", Kind.CHAT, rq.check_chat, "chatcmpl-"),
    b"/v1/completions": _route("/v1/completions", Kind.COMPLETION, rq.check_completion, "cmpl-"),
}


class _Read:
    """One request's body as the budgeted readers take it: the holder of its body-budget grant
    (`rq.BodyHolder`, given back when its answer ended) and the edge's body reader
    (`rq.BodyContent`), one object for both."""

    __slots__ = ("body_reader", "guard", "held", "req")

    def __init__(self, guard: ConnectionGuard, req: EdgeRequest) -> None:
        self.guard = guard
        self.held = 0
        self.body_reader: Any = None
        self.req = req

    async def readany(self) -> bytes:
        return await self.req.read_chunk()

    def at_eof(self) -> bool:
        return self.req.body_complete()


class EdgeRoutes:
    def __init__(
        self,
        *,
        flow: Flow,
        gate: AuthGate,
        metrics: Metrics,
        admission: Admission,
        guard: ConnectionGuard,
        max_payload: int,
        rate_check: Callable[[str], None] | None,
    ) -> None:
        self.flow = flow
        self.gate = gate
        self.metrics = metrics
        self.admission = admission
        self.guard = guard
        self.max_payload = max_payload
        self.rate_check = rate_check
        self.cors = gate.add_cors if gate.core.cors_origins else None
        self._loop = RunningLoop()
        # the level is set before the routes are built (smg/logs.py): a debug line's call (the
        # lazy logger's bind and the call's arguments) is skipped at once when it is off
        self.debug = log.bind().is_enabled_for(logging.DEBUG)

    def handle(self, req: EdgeRequest, out: EdgeResponse) -> Awaitable[Reply | None]:
        """The request's answer, to await: a whole one as a `Reply` the edge writes itself, a
        stream written through `out`. No coroutine of its own when tracing is off."""
        head = req.head
        route = ROUTES.get(head.path) if head.method == b"POST" else None
        if route is None:  # only a request the edge could not hand over comes here
            method, path = head.method.decode("latin-1"), head.path.decode("latin-1")
            raise errors.unknown_url(method, path)
        headers = client_headers(head)
        # the request id: the client's, else a new one; the engine's (`rq.engine_id_for`, the
        # client's headers read once): always one the gateway made
        rid = rq.request_id_in(headers)
        if rid is None:
            rid = engine_id = route.id_prefix + rq.new_request_id()
        else:
            engine_id = route.id_prefix + rq.new_request_id()
        if not tracing.on:
            return self._serve(req, out, route, headers, rid, engine_id)
        return self._traced(req, out, route, headers, rid, engine_id)

    async def _traced(
        self,
        req: EdgeRequest,
        out: EdgeResponse,
        route: _Route,
        headers: CIMultiDict[str],
        rid: str,
        engine_id: str,
    ) -> Reply | None:
        with traced_route("POST", route.path, headers) as span:
            return await self._serve(req, out, route, headers, rid, engine_id, span)

    async def _serve(
        self,
        req: EdgeRequest,
        out: EdgeResponse,
        route: _Route,
        headers: CIMultiDict[str],
        rid: str,
        engine_id: str,
        span: Any = None,
    ) -> Reply | None:
        """Answer the request: a whole answer returned (the edge writes it), a stream written
        through `out`. One coroutine for the whole of it (the checks, the flow's call): each
        nested one costs a frame a request; `span`: the request's server span, if traced."""
        bound = _RID.set(rid)  # structlog's `request_id` for every log line of the request
        loop_time = self._loop.get().time
        start = loop_time()
        debug = self.debug
        if debug:
            log.debug("request_started", method="POST", path=route.path)
        status, code = 500, ""
        hold = _Read(self.guard, req)
        reply: Reply | None = None
        try:
            try:
                principal = self.gate.decide_parts(
                    route.cls, "POST", headers, partial(_host, req.peer)
                )  # partial, not a lambda: one Python call when the peer is asked for
                if isinstance(principal, JwtCheck):
                    principal = await self.gate.verify(principal)
                if self.admission.draining:
                    raise errors.draining()
                if self.rate_check is not None:
                    self.rate_check(principal.tenant)
                head, limit = req.head, self.max_payload
                length = head.content_length
                if length is not None and length > limit:
                    raise errors.payload_too_large(limit)
                raw = await rq.read_budgeted(hold, hold, length, limit)
                body = rq.parse_object(raw)
                model = rq.require_model(body)
                sampling = route.check(body)
                request = rq.build_request(
                    headers, principal, rid, route.kind, route.path, raw, body, model, sampling,
                    engine_id,
                )  # fmt: skip
                client = EdgeClient(head, route.path, out, headers.get("Origin"), self.cors)
                # the flow prepares its streams against the client: EdgeClient has what aiohttp
                # reads (typing.cast would cost a call a request)
                flow_client: Any = client
                resp = await self.flow.answer(request, openai_renderer, flow_client)
                status = resp.status
                if isinstance(resp, Whole):
                    reply = self._whole(resp, headers, rid)
                elif not resp.prepared:
                    reply = self._reply(resp, headers, rid)
            except errors.ApiError as err:
                status, code = err.status, err.code
                if out.started:
                    raise
                reply = self._reply(error_response(err, rid), headers, rid)
        except asyncio.CancelledError:
            status, code = 499, ""
            raise
        except ConnectionResetError:  # the client left while we wrote to it: nobody to answer
            status, code = 499, "client_closed_request"
            raise
        except Exception as exc:
            log.exception("unhandled_error", path=route.path, request_id=rid)
            status, code = 500, "internal_error"
            if out.started:
                raise
            failed = error_response(errors.internal(type(exc).__name__), rid)
            reply = self._reply(failed, headers, rid)
        finally:
            if hold.held:
                self.guard.budget.release(hold.held)
                hold.held = 0
            took = loop_time() - start
            self.metrics.request_done("POST", route.path, status, code, took)
            if debug:
                log.debug("request_finished", status=status, code=code, ms=round(took * 1e3, 1))
            _RID.reset(bound)
        if span is not None:
            span.set_attribute("http.response.status_code", status)
        return reply

    def _whole(self, whole: Whole, headers: CIMultiDict[str], rid: str) -> Reply:
        """A `Whole` as the edge writes it: its headers rendered at once (no aiohttp response
        built and taken apart), unless CORS or the request id must be added to them."""
        if self.cors is not None or "X-Request-Id" not in whole.headers:
            return self._reply(as_response(whole), headers, rid)
        return whole_body_reply(whole.status, whole.body, whole.content_type, whole.headers)

    def _reply(self, resp: web.StreamResponse, headers: CIMultiDict[str], rid: str) -> Reply:
        """A whole answer as the edge writes it, with its request id and CORS headers."""
        if "X-Request-Id" not in resp.headers:
            resp.headers["X-Request-Id"] = rid
        if self.cors is not None:
            self.cors(headers.get("Origin"), resp)
        return whole_reply(resp)


def _host(peer: object) -> str | None:
    """The peer's address as aiohttp's `request.remote` says it."""
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return None
