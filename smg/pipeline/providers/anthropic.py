"""Anthropic: OpenAI chat completions translated to Messages and back (pure).

Out: POST /v1/messages with `x-api-key` and `anthropic-version: 2023-06-01`
(anthropic_request.py builds the body). Back: a Messages answer as a chat completion (text,
`tool_use` blocks as `tool_calls`, thinking as `reasoning_content`, stop reasons mapped, usage);
a stream through `AnthropicStream` (anthropic_stream.py); an Anthropic error
`{"type": "error", "error": {"type", "message"}}` as OpenAI's error shape with the same status
(429 `rate_limit_error` -> code `rate_limit_exceeded`, 529 `overloaded_error` -> `overloaded`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from smg.pipeline.providers.anthropic_request import ANTHROPIC_VERSION, messages_body
from smg.pipeline.providers.anthropic_stream import AnthropicStream, finish_reason, usage_of
from smg.pipeline.providers.base import Outgoing
from smg.pipeline.providers.errors import openai_error, status_code
from smg.pipeline.providers.openai import listed_ids

# Anthropic's error type -> OpenAI's code (the status is kept as the upstream sent it)
ERROR_CODES = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "invalid_api_key",
    "permission_error": "permission_denied",
    "not_found_error": "not_found",
    "request_too_large": "request_too_large",
    "rate_limit_error": "rate_limit_exceeded",
    "api_error": "upstream_error",
    "overloaded_error": "overloaded",
}


def error_fields(body: Any) -> tuple[str | None, str | None]:
    """(type, message) of an Anthropic error body or `error` event, (None, None) otherwise."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return None, None
    kind, message = err.get("type"), err.get("message")
    return (kind if isinstance(kind, str) else None), (
        message if isinstance(message, str) else None
    )


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now  # for `created`: the pure core reads no clock of its own

    def chat_request(self, body: dict[str, Any], *, api_key: str | None, stream: bool) -> Outgoing:
        data = orjson.dumps(messages_body(body, stream=stream))
        headers = {**_headers(api_key), "Content-Type": "application/json"}
        return Outgoing("POST", "/v1/messages", headers, data)

    def chat_answer(self, status: int, body: bytes) -> tuple[int, bytes]:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if status >= 400:
            kind, message = error_fields(data)
            code = ERROR_CODES.get(kind or "", status_code(status))
            text = message or f"the upstream answered {status}"
            return status, openai_error(status, text, code)
        if not isinstance(data, dict) or data.get("type") != "message":
            return 502, openai_error(
                502, "the upstream's answer is not a message", "upstream_bad_answer"
            )
        return status, orjson.dumps(self._completion(data))

    def _completion(self, msg: dict[str, Any]) -> dict[str, Any]:
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in msg.get("content") or ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "thinking":
                thinking.append(str(block.get("thinking", "")))
            elif kind == "tool_use":
                args = orjson.dumps(block.get("input") or {}).decode()
                fn = {"name": block.get("name"), "arguments": args}
                calls.append({"id": block.get("id"), "type": "function", "function": fn})
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if thinking:
            message["reasoning_content"] = "".join(thinking)
        if calls:
            message["tool_calls"] = calls
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason(msg.get("stop_reason")),
        }
        return {
            "id": msg.get("id"),
            "object": "chat.completion",
            "created": int(self.now()),
            "model": msg.get("model"),
            "choices": [choice],
            "usage": usage_of(msg.get("usage")),
        }

    def chat_stream(self, model: str) -> AnthropicStream:
        return AnthropicStream(model, int(self.now()))

    def models_request(self, api_key: str | None) -> Outgoing:
        return Outgoing("GET", "/v1/models", _headers(api_key))

    def model_ids(self, status: int, body: bytes) -> tuple[str, ...]:
        return listed_ids(status, body)  # Anthropic's listing: {"data": [{"id": ...}], ...}
