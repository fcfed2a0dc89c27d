"""Upstream errors in OpenAI's shape: the status kept, a stable code, the vendor's message."""

from __future__ import annotations

from smg.errors import ApiError

# status -> OpenAI's code for it (the codes OpenAI's own API answers with, else ours)
_CODE_BY_STATUS = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "not_found",
    413: "request_too_large",
    429: "rate_limit_exceeded",
    529: "overloaded",
}


def status_code(status: int) -> str:
    """The stable code of an upstream error status without a vendor type of its own."""
    if status in _CODE_BY_STATUS:
        return _CODE_BY_STATUS[status]
    return "upstream_error" if status >= 500 else "invalid_request_error"


def openai_error(status: int, message: str, code: str, *, type: str | None = None) -> bytes:
    return ApiError(status, code, message, type=type).to_json()
