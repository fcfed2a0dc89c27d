"""The one middleware every request passes: request id, API key, errors, metrics.

Every client-visible failure leaves here in the OpenAI error shape with a stable code (and an
`X-SMG-Error-Code` header); anything unexpected is logged once and answered 500, never a crash.
A client that left is counted as 499 and not logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from smg import errors
from smg.api.requests import new_request_id, request_id_of
from smg.metrics import Metrics

log = structlog.get_logger("smg.gateway")

_PUBLIC_PATHS = frozenset({"/health", "/liveness", "/readiness", "/v1/models"})
_ID_PREFIX = {"/v1/chat/completions": "chatcmpl-", "/v1/completions": "cmpl-"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(err: errors.ApiError, request_id: str) -> web.Response:
    headers = {"X-Request-Id": request_id, "X-SMG-Error-Code": err.code}
    if err.status == 503:
        headers["Retry-After"] = "1"
    elif err.status == 429:
        headers["Retry-After"] = "2"
    if err.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="data-plane"'
    return web.Response(
        body=err.to_json(), status=err.status, content_type="application/json", headers=headers
    )


def check_key(request: web.Request, api_key: str) -> None:
    auth = request.headers.get("Authorization")
    if not auth or not auth.startswith("Bearer "):
        raise errors.missing_api_key()
    if auth[7:].strip() != api_key:
        raise errors.wrong_api_key()


def edge_middleware(api_key: str | None, metrics: Metrics) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        loop_time = asyncio.get_running_loop().time
        start = loop_time()
        path = request.path
        rid = request_id_of(request)
        if rid is None:
            rid = _ID_PREFIX.get(path, "req-") + new_request_id()
        request["request_id"] = rid
        status = 500
        error_code = ""
        try:
            if api_key is not None and path not in _PUBLIC_PATHS:
                check_key(request, api_key)
            resp = await handler(request)
            status = resp.status
        except errors.ApiError as err:
            resp = error_response(err, rid)
            status = err.status
            error_code = err.code
        except web.HTTPException as exc:
            mapped = _http_exception_to_api(exc, request)
            resp = error_response(mapped, rid)
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
            resp = error_response(errors.internal(type(exc).__name__), rid)
            status = 500
            error_code = "internal_error"
        finally:
            route = request.match_info.route.resource
            label = route.canonical if route is not None else "other"
            metrics.request_done(request.method, label, status, error_code, loop_time() - start)
        if not resp.prepared and "X-Request-Id" not in resp.headers:
            resp.headers["X-Request-Id"] = rid
        return resp

    return middleware


def _http_exception_to_api(exc: web.HTTPException, request: web.Request) -> errors.ApiError:
    if exc.status == 404:
        return errors.unknown_url(request.method, request.path)
    if exc.status == 405:
        return errors.method_not_allowed(request.method, request.path)
    if exc.status == 413:
        return errors.payload_too_large(request.app._client_max_size)
    return errors.ApiError(exc.status, "http_error", exc.reason)
