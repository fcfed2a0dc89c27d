"""The edge's middlewares. The one every request passes: request id, the auth gate, errors,
metrics, audit; and the drain's: while the gateway drains, new requests get 503 at once.

The gate (`smg/api/auth.py`) decides before the handler runs and leaves the caller in
`request["principal"]`; every control-plane request then gets its audit line with the final status.
Every client-visible failure leaves here in the OpenAI error shape with a stable code (and an
`X-SMG-Error-Code` header), in the flat `{"error", "code"}` shape of the /workers API, or in
Anthropic's shape on the Messages routes (`anthropic_route`: one place decides by path); anything
unexpected is logged once and answered 500, never a crash. A client that left is counted as 499
and not logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson
import structlog
from aiohttp import web

from smg import errors, tracing
from smg.api import audit
from smg.api.auth import AuthGate
from smg.api.requests import new_request_id, request_id_of
from smg.core.auth import AuthError, JwtCheck, RouteClass
from smg.core.auth_keys import Principal
from smg.flow.admission import Admission
from smg.flow.render import ROUTED_WORKER_HEADER
from smg.metrics import Metrics

log = structlog.get_logger("smg.gateway")

PROBES = frozenset({"/health", "/liveness", "/readiness"})
_ID_PREFIX = {"/v1/chat/completions": "chatcmpl-", "/v1/completions": "cmpl-"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(
    err: errors.ApiError, request_id: str, *, flat: bool = False, anthropic: bool = False
) -> web.Response:
    """The OpenAI error shape, or with `flat` the /workers API's `{"error": msg, "code": CODE}`,
    or with `anthropic` Anthropic's (`{"type": "error", "error": {"type", "message"}}`)."""
    headers = {"X-Request-Id": request_id, "X-SMG-Error-Code": err.code}
    if err.status == 503:
        headers["Retry-After"] = "1"
    elif err.status == 429:
        headers["Retry-After"] = "2"
    if err.status == 401:
        realm = err.realm if isinstance(err, AuthError) else "data-plane"
        headers["WWW-Authenticate"] = f'Bearer realm="{realm}"'
    if flat:
        body = orjson.dumps({"error": err.message, "code": err.code.upper()})
    elif anthropic:
        body = orjson.dumps(errors.anthropic_body(err, request_id))
    else:
        body = err.to_json()
    return web.Response(
        body=body, status=err.status, content_type="application/json", headers=headers
    )


def anthropic_route(path: str) -> bool:
    """The Messages surface (/v1/messages, /v1/messages/count_tokens) answers every error in
    Anthropic's shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def relayed_in_anthropic_shape(resp: web.StreamResponse, request_id: str) -> web.StreamResponse:
    """An HTTP worker's error answer relayed on a Messages route (the worker speaks OpenAI's
    error shape: `{"error": {"message", "code", ...}}`), said again in Anthropic's shape with
    its status and words. Anything else is left as it is."""
    body = resp.body if isinstance(resp, web.Response) and not resp.prepared else None
    if not isinstance(body, bytes | bytearray):  # (a relayed body is the bytearray read)
        return resp
    try:
        said = orjson.loads(body)
    except orjson.JSONDecodeError:
        return resp
    err = said.get("error") if isinstance(said, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return resp
    code = err.get("code")
    code = code if isinstance(code, str) and code else "upstream_error"
    shaped = error_response(
        errors.ApiError(resp.status, code, err["message"]), request_id, anthropic=True
    )
    for name in (ROUTED_WORKER_HEADER, "Retry-After"):
        if name in resp.headers:
            shaped.headers[name] = resp.headers[name]
    return shaped


def edge_middleware(gate: AuthGate, metrics: Metrics) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        rid = request_id_of(request)
        if rid is None:
            rid = _ID_PREFIX.get(request.path, "req-") + new_request_id()
        request["request_id"] = rid
        # every log line while this request is served names it (and its trace, when traced)
        bound = structlog.contextvars.bind_contextvars(request_id=rid)
        try:
            if not tracing.enabled() or request.path in PROBES:
                return await serve(request, handler, rid)
            with traced(request) as span:
                resp = await serve(request, handler, rid)
                span.set_attribute("http.response.status_code", request["status"])
                return resp
        finally:
            structlog.contextvars.reset_contextvars(**bound)

    async def serve(request: web.Request, handler: Handler, rid: str) -> web.StreamResponse:
        loop_time = asyncio.get_running_loop().time
        start = loop_time()
        path = request.path
        log.debug("request_started", method=request.method, path=path)
        status = 500
        error_code = ""
        cls = gate.route_class(request)
        denied: Principal | None = None
        try:
            pre = None
            if cls is not None and cls is not RouteClass.PUBLIC:
                principal = gate.decide(request, cls)
                if isinstance(principal, JwtCheck):
                    principal = await gate.verify(principal)
                request["principal"] = principal
            elif cls is None:
                pre = gate.preflight(request)  # CORS, from an allowed origin
            resp = await handler(request) if pre is None else pre
            if resp.status >= 400 and anthropic_route(path):
                resp = relayed_in_anthropic_shape(resp, rid)
            status = resp.status
        except errors.ApiError as err:
            resp = error_response(
                err, rid, flat=path.startswith("/workers"), anthropic=anthropic_route(path)
            )
            status = err.status
            error_code = err.code
            if isinstance(err, AuthError):
                denied = err.principal
        except web.HTTPException as exc:
            mapped = _http_exception_to_api(exc, request)
            resp = error_response(mapped, rid, anthropic=anthropic_route(path))
            status = mapped.status
            error_code = mapped.code
        except asyncio.CancelledError:
            status = 499
            raise
        except ConnectionResetError:  # the client left while we wrote to it: nobody to answer
            status = 499
            error_code = "client_closed_request"
            raise
        except Exception as exc:
            log.exception("unhandled_error", path=path, request_id=rid)
            resp = error_response(
                errors.internal(type(exc).__name__), rid, anthropic=anthropic_route(path)
            )
            status = 500
            error_code = "internal_error"
        finally:
            route = request.match_info.route.resource
            label = route.canonical if route is not None else "other"
            request["status"] = status
            took = loop_time() - start
            metrics.request_done(request.method, label, status, error_code, took)
            log.debug("request_finished", status=status, code=error_code, ms=round(took * 1e3, 1))
            if cls is RouteClass.ADMIN and gate.audit:
                admitted = request.get("principal")
                audit.record(request, status, admitted or denied, admitted is not None)
        if not resp.prepared and "X-Request-Id" not in resp.headers:
            resp.headers["X-Request-Id"] = rid
        return resp

    return middleware


@contextmanager
def traced(request: web.Request) -> Iterator[Any]:
    """The request's server span (continuing an incoming `traceparent`), its trace id bound
    into the log context. Attributes: route and method only (never headers or bodies)."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "other"
    with traced_route(request.method, route, request.headers) as span:
        yield span


@contextmanager
def traced_route(method: str, route: str, headers: Mapping[str, str]) -> Iterator[Any]:
    """`traced` from the request's method, canonical route and headers (any edge)."""
    attributes = {"http.route": route, "http.request.method": method}
    with tracing.server_span(f"{method} {route}", headers, attributes) as span:
        trace_id, _ = tracing.ids(span)
        bound = structlog.contextvars.bind_contextvars(trace_id=trace_id)
        try:
            yield span
        finally:
            structlog.contextvars.reset_contextvars(**bound)


def metrics_middleware(gate: AuthGate) -> Any:
    """The Prometheus listener's gate: a control-plane credential of any role (loopback only
    while none is configured)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.http_exception is None:
            try:
                principal = gate.decide(request, RouteClass.METRICS)
                if isinstance(principal, JwtCheck):
                    await gate.verify(principal)
            except errors.ApiError as err:
                return error_response(err, request_id_of(request) or "req-" + new_request_id())
        return await handler(request)

    return middleware


def _http_exception_to_api(exc: web.HTTPException, request: web.Request) -> errors.ApiError:
    if exc.status == 404:
        return errors.unknown_url(request.method, request.path)
    if exc.status == 405:
        return errors.method_not_allowed(request.method, request.path)
    if exc.status == 413:
        return errors.payload_too_large(request.app._client_max_size)
    return errors.ApiError(exc.status, "http_error", exc.reason)


def refuse_while_draining(admission: Admission) -> Any:
    """Middleware: while the gateway drains, every request but the health probes gets 503
    `shutting_down` (with Retry-After) before anything else is done for it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if admission.draining and request.path not in PROBES:
            raise errors.draining()
        return await handler(request)

    return middleware
