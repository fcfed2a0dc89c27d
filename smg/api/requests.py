"""Reading and checking client requests: body limits, JSON, required fields, request ids.

Every client mistake becomes an `ApiError` with a stable code, never a 500.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import orjson
from aiohttp import web

from smg import errors
from smg.pipeline.engine_types import SamplingParams
from smg.pipeline.sampling import sampling_from_openai

_BOOT = os.urandom(4).hex()
_SEQ = itertools.count(1)


def new_request_id() -> str:
    return f"{_BOOT}-{next(_SEQ):x}"


def request_id_of(request: web.BaseRequest) -> str | None:
    """The first client request-id header present, when it is 1-128 visible ASCII characters."""
    headers = request.headers
    for name in _ID_HEADERS:
        rid = headers.get(name)
        if rid is not None:
            if 0 < len(rid) <= 128 and rid.isascii() and rid.isprintable() and " " not in rid:
                return rid
            return None
    return None


_ID_HEADERS = ("x-request-id", "x-correlation-id", "x-trace-id", "request-id")


def engine_request_id(request: web.BaseRequest, prefix: str) -> str:
    """The id engines and workers get for this request: always one the gateway made. When the
    client sent no id of its own, the one the edge made for it (`request["request_id"]`) is
    reused, so logs, headers and the engine agree; otherwise a fresh `<prefix><boot>-<n>`."""
    if request_id_of(request) is None:
        rid: str = request["request_id"]
        return rid
    return f"{prefix}{new_request_id()}"


async def read_body(request: web.BaseRequest, limit: int) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise errors.payload_too_large(limit)
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise errors.payload_too_large(limit) from None


def parse_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise errors.ApiError(400, "invalid_json", "Request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    if not isinstance(body, dict):
        raise errors.invalid_type(f"Request body must be a JSON object, not {type(body).__name__}")
    return body


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise errors.missing_field("model")
    if not isinstance(model, str) or not model:
        raise errors.invalid_type("'model' must be a non-empty string", param="model")
    return model


def check_chat(body: dict[str, Any]) -> SamplingParams:
    messages = body.get("messages")
    if messages is None:
        raise errors.missing_field("messages")
    if not isinstance(messages, list):
        raise errors.invalid_type("'messages' must be an array", param="messages")
    if not messages:
        raise errors.invalid_request(
            "Invalid 'messages': empty array; at least one message is required",
            param="messages",
            code="empty_array",
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise errors.invalid_type(
                f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}].role"
            )
        if m["role"] not in _ROLES:
            raise errors.invalid_value(
                f"messages[{i}].role: unknown role '{m['role']}', expected one of "
                + ", ".join(sorted(_ROLES)),
                param=f"messages[{i}].role",
            )
    return _check_common(body, chat=True)


def check_completion(body: dict[str, Any]) -> SamplingParams:
    if "prompt" not in body:
        raise errors.missing_field("prompt")
    prompt = body["prompt"]
    if not isinstance(prompt, str | list):
        raise errors.invalid_type("'prompt' must be a string or an array", param="prompt")
    return _check_common(body, chat=False)


def check_embeddings(body: dict[str, Any]) -> None:
    if "input" not in body:
        raise errors.missing_field("input")
    return None


def _check_common(body: dict[str, Any], *, chat: bool) -> SamplingParams:
    """The checks both endpoints share; the sampling fields are validated (and mapped) once."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise errors.invalid_type("'stream' must be a boolean", param="stream")
    return sampling_from_openai(body, chat=chat)


_ROLES = frozenset({"system", "user", "assistant", "tool", "function", "developer"})
