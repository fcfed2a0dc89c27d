"""An Anthropic Messages stream as OpenAI `chat.completion.chunk` SSE (pure, split anywhere).

message_start -> the role chunk; content_block_start of a `tool_use` -> a tool call's first
chunk (id, name); text_delta -> content; thinking_delta -> reasoning_content; input_json_delta
-> the tool call's argument fragment; message_delta -> the stop reason and output usage kept;
message_stop -> the last chunk (finish_reason, usage); ping, signature_delta and block stops say
nothing. An `error` event ends the translation: what came before it in the same bytes is still
returned, then the next `feed` or `close` raises `ProviderStreamError` (status and code as
OpenAI's); so does `close` for a stream that ends before message_stop.
"""

from __future__ import annotations

from typing import Any

import orjson

from smg.pipeline.chat_answer import ChatAnswerError, SseReader, payload_json
from smg.pipeline.providers.base import ProviderStreamError

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}
# an `error` event's type -> (status, OpenAI code): the stream is already 200, so these go
# into the relay's error event
_STREAM_ERRORS = {
    "rate_limit_error": (429, "rate_limit_exceeded"),
    "overloaded_error": (529, "overloaded"),
    "api_error": (500, "upstream_error"),
    "invalid_request_error": (400, "invalid_request_error"),
}


def finish_reason(stop_reason: Any) -> str | None:
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")


def usage_of(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    cached = int(usage.get("cache_read_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + cached
    prompt += int(usage.get("cache_creation_input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    out = {"prompt_tokens": prompt, "completion_tokens": completion}
    out["total_tokens"] = prompt + completion
    return out


class AnthropicStream:
    __slots__ = (
        "_created",
        "_error",
        "_id",
        "_model",
        "_reader",
        "_stop",
        "_tools",
        "_usage",
        "ended",
    )

    def __init__(self, model: str, created: int) -> None:
        self._reader = SseReader()
        self._model = model
        self._created = created
        self._id = ""
        self._usage: dict[str, Any] = {}
        self._stop: Any = None
        self._tools: dict[int, int] = {}  # content block index -> tool call index
        self.ended = False  # message_stop seen
        self._error: ProviderStreamError | None = None  # an error event seen

    def feed(self, data: bytes) -> bytes:
        if self._error is not None:
            raise self._error
        out: list[bytes] = []
        try:
            for payload in self._reader.feed(data):
                out.append(self._event(payload_json(payload)))
        except ChatAnswerError as exc:
            raise ProviderStreamError(f"the upstream's stream is malformed: {exc}") from None
        except ProviderStreamError as exc:
            self._error = exc
        return b"".join(out)

    def close(self) -> bytes:
        if self._error is not None:
            raise self._error
        if not self.ended:
            raise ProviderStreamError("the upstream's stream ended before message_stop")
        return b"data: [DONE]\n\n"

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [choice],
            **extra,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def _event(self, ev: Any) -> bytes:
        kind = ev.get("type") if isinstance(ev, dict) else None
        if self.ended:
            return b""
        if kind == "message_start":
            msg = ev.get("message") or {}
            self._id = str(msg.get("id") or "")
            self._model = str(msg.get("model") or self._model)
            self._usage.update(msg.get("usage") or {})
            return self._chunk({"role": "assistant", "content": ""})
        if kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self._tools[ev.get("index", 0)] = len(self._tools)
                fn = {"name": block.get("name"), "arguments": ""}
                call = {"index": index, "id": block.get("id"), "type": "function", "function": fn}
                return self._chunk({"tool_calls": [call]})
            if block.get("type") == "text" and block.get("text"):
                return self._chunk({"content": block["text"]})
            return b""
        if kind == "content_block_delta":
            return self._delta(ev.get("index", 0), ev.get("delta") or {})
        if kind == "message_delta":
            self._stop = (ev.get("delta") or {}).get("stop_reason")
            self._usage.update(ev.get("usage") or {})
            return b""
        if kind == "message_stop":
            self.ended = True
            return self._chunk({}, finish_reason(self._stop) or "stop", usage=usage_of(self._usage))
        if kind == "error":
            err = ev.get("error") or {}
            status, code = _STREAM_ERRORS.get(str(err.get("type")), (502, "upstream_error"))
            raise ProviderStreamError(
                str(err.get("message") or "upstream error"), status=status, code=code
            )
        return b""  # ping, content_block_stop, events added later

    def _delta(self, block: int, delta: dict[str, Any]) -> bytes:
        kind = delta.get("type")
        if kind == "text_delta":
            return self._chunk({"content": delta.get("text", "")})
        if kind == "thinking_delta":
            return self._chunk({"reasoning_content": delta.get("thinking", "")})
        if kind == "input_json_delta" and block in self._tools:
            fn = {"arguments": delta.get("partial_json", "")}
            return self._chunk({"tool_calls": [{"index": self._tools[block], "function": fn}]})
        return b""  # signature_delta, citations
