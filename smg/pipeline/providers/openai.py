"""OpenAI (and any OpenAI-compatible upstream): pass-through.

The request goes out as it came (POST /v1/chat/completions, the credential as a Bearer
token); the answer comes back nearly as it is: a success body and the stream's bytes are
relayed untouched, an error body that is not OpenAI's shape (a proxy's HTML page, an empty
body) becomes one with the same status. Models: GET /v1/models.
"""

from __future__ import annotations

from typing import Any

import orjson

from smg.pipeline.providers.base import Outgoing
from smg.pipeline.providers.errors import openai_error, status_code


class PassThroughStream:
    """The upstream already streams `chat.completion.chunk` SSE: bytes out as they came in."""

    __slots__ = ()

    def feed(self, data: bytes) -> bytes:
        return data

    def close(self) -> bytes:
        return b""  # the upstream's own `data: [DONE]` went through `feed`


class OpenAIProvider:
    name = "openai"

    def chat_request(self, body: dict[str, Any], *, api_key: str | None, stream: bool) -> Outgoing:
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        return Outgoing("POST", "/v1/chat/completions", headers, orjson.dumps(body))

    def chat_answer(self, status: int, body: bytes) -> tuple[int, bytes]:
        if status < 400:
            return status, body
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            return status, body  # OpenAI's own error shape
        message = f"the upstream answered {status}"
        return status, openai_error(status, message, status_code(status))

    def chat_stream(self, model: str) -> PassThroughStream:
        return PassThroughStream()

    def models_request(self, api_key: str | None) -> Outgoing:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return Outgoing("GET", "/v1/models", headers)

    def model_ids(self, status: int, body: bytes) -> tuple[str, ...]:
        return listed_ids(status, body)


def listed_ids(status: int, body: bytes) -> tuple[str, ...]:
    """The ids of a `{"data": [{"id": ...}, ...]}` listing (OpenAI's and Anthropic's), in order,
    once each; () for an error status or another shape."""
    if status != 200:
        return ()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    return model_ids(data)


def model_ids(data: object) -> tuple[str, ...]:
    """The ids of an OpenAI model list (`{"data": [{"id": ...}, ...]}`), in order, once each."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return ()
    ids = (item.get("id") for item in items if isinstance(item, dict))
    return tuple(dict.fromkeys(i for i in ids if isinstance(i, str) and i))
