"""Client-visible errors: one type, a stable `code`, the right status, the OpenAI body shape.

`{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`
"""

from __future__ import annotations

from typing import Any

import orjson

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    499: "client_closed_request",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error that becomes an HTTP response in the OpenAI error shape."""

    __slots__ = ("code", "message", "param", "status", "type")

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type = type or _TYPE_BY_STATUS.get(status, "api_error")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.body())

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r})"


def invalid_json(detail: str) -> ApiError:
    return ApiError(400, "invalid_json", f"Request body is not valid JSON: {detail}")


def invalid_type(message: str, *, param: str | None = None) -> ApiError:
    return ApiError(400, "invalid_type", message, param=param)


def invalid_value(message: str, *, param: str | None = None) -> ApiError:
    return ApiError(400, "invalid_value", message, param=param)


def invalid_request(
    message: str, *, param: str | None = None, code: str = "invalid_value"
) -> ApiError:
    return ApiError(400, code, message, param=param)


def empty_array(name: str, what: str) -> ApiError:
    """An array that must hold at least one `what` (`messages`, `input`) is empty."""
    return invalid_request(
        f"Invalid '{name}': empty array; at least one {what} is required",
        param=name,
        code="empty_array",
    )


def missing_field(name: str) -> ApiError:
    return ApiError(
        400, "missing_required_parameter", f"Missing required parameter: '{name}'", param=name
    )


def missing_model(path: str | None = None) -> ApiError:
    """IGW mode: a native request must name its model (the Rust gateway's code; its message for
    /generate)."""
    return invalid_request(
        f"{path or 'Requests'} {'requests ' if path else ''}must include a model when IGW "
        "routing is enabled",
        param="model",
        code="missing_model",
    )


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404,
        "model_not_found",
        f"No worker available for model '{model}'",
        type="invalid_request_error",
    )


def no_healthy_worker(model: str | None = None) -> ApiError:
    where = f" for model '{model}'" if model else ""
    return ApiError(
        503,
        "no_available_workers",
        f"All workers{where} are unavailable (circuit breaker open or unhealthy)",
        type="server_error",
    )


def payload_too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "request_body_too_large",
        f"Request body exceeded the payload limit (max_payload_size = {limit} bytes)",
        type="invalid_request_error",
    )


# Errors built from a worker's or transport's failure say what happened, never where: no worker
# URL, address or internal exception text reaches the client (those go to the log with the
# request id).
def upstream_unreachable() -> ApiError:
    return ApiError(502, "upstream_connection_error", "Could not reach a worker for this request")


def upstream_timeout(seconds: float | None = None) -> ApiError:
    within = f" within {seconds:g} s" if seconds else " in time"
    return ApiError(504, "upstream_timeout", f"The worker did not answer{within}")


def upstream_idle(seconds: float) -> ApiError:
    return ApiError(
        504, "upstream_timeout", f"The worker's answer stalled (no data for {seconds:g} s)"
    )


def upstream_broken() -> ApiError:
    return ApiError(502, "upstream_stream_error", "The worker's response broke off")


def upstream_not_chat() -> ApiError:
    return ApiError(502, "upstream_bad_answer", "The worker's answer is not a chat completion")


def upstream_too_large(limit: int) -> ApiError:
    return ApiError(
        502,
        "upstream_response_too_large",
        f"The worker's answer exceeded the gateway's limit ({limit} bytes)",
    )


def engine_failed() -> ApiError:
    return ApiError(502, "engine_error", "The engine failed while answering this request")


def missing_api_key() -> ApiError:
    return ApiError(
        401,
        "invalid_api_key",
        "Missing API key: send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`)",
        type="invalid_request_error",
    )


def wrong_api_key() -> ApiError:
    return ApiError(401, "invalid_api_key", "Invalid API key", type="invalid_request_error")


def queue_full() -> ApiError:
    return ApiError(429, "admission_queue_full", "Too many requests: the admission queue is full")


def queue_timeout(seconds: float) -> ApiError:
    return ApiError(
        408, "admission_queue_timeout", f"Request waited over {seconds:g} s in the admission queue"
    )


def draining() -> ApiError:
    return ApiError(503, "shutting_down", "The gateway is shutting down", type="server_error")


def body_over_budget(capacity: int, largest: int, *, size: int | None = None) -> ApiError:
    what = "Request body" if size is None else f"Request body of {size} bytes"
    return ApiError(
        413,
        "request_body_too_large",
        f"{what} exceeds the largest body the gateway buffers ({largest} bytes: three quarters "
        f"of max_buffered_request_bytes = {capacity})",
        type="invalid_request_error",
    )


def body_budget_timeout(size: int, seconds: float) -> ApiError:
    return ApiError(
        503,
        "request_body_budget_timeout",
        f"No room to buffer a {size}-byte request body within {seconds:g} s "
        "(max_buffered_request_bytes is in use); retry later",
        type="server_error",
    )


def body_timeout(seconds: float) -> ApiError:
    return ApiError(
        408, "request_body_timeout", f"The request body stalled: no byte for {seconds:g} s"
    )


def too_many_connections(limit: int) -> ApiError:
    return ApiError(
        503,
        "too_many_connections",
        f"The gateway has reached its limit of {limit} open connections (max_connections)",
        type="server_error",
    )


def unknown_url(method: str, path: str) -> ApiError:
    return ApiError(404, "unknown_url", f"Invalid URL ({method} {path})")


def method_not_allowed(method: str, path: str) -> ApiError:
    return ApiError(405, "method_not_allowed", f"Invalid URL ({method} {path})")


def internal(detail: str) -> ApiError:
    return ApiError(500, "internal_error", f"Internal error: {detail}", type="server_error")


# Anthropic's error types (the Messages surface, /v1/messages*): by status, one place
_ANTHROPIC_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_body(err: ApiError, request_id: str | None = None) -> dict[str, Any]:
    """`err` in Anthropic's error shape: `{"type": "error", "error": {"type", "message"}}`."""
    kind = _ANTHROPIC_TYPE_BY_STATUS.get(err.status)
    if kind is None:
        kind = "api_error" if err.status >= 500 else "invalid_request_error"
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": err.message}}
    if request_id is not None:
        body["request_id"] = request_id
    return body
