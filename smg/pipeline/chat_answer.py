"""An HTTP worker's chat-completions answer, read back as parser output (pure; no IO).

A surface the gateway renders itself (Responses) runs in HTTP mode by sending the worker a chat
completions body and reading its answer back: the worker has already split the text into
`content`, `reasoning_content` and `tool_calls`, so each answer (a whole `chat.completion`, or
one `chat.completion.chunk` of a stream) becomes one `ChatStep`: the `ParseDelta` a token-mode
parser would have produced, with the finish reason and usage when they come. The renderer then
runs the very same item machine as in token mode.

`SseReader` splits a worker's event stream into its payloads (`data:` lines), whatever the
chunking of the bytes; a line longer than its bound, a payload that is not JSON
(`payload_json`) or not a chat answer raises `ChatAnswerError` (the worker's fault: the flow
answers 502, or ends a begun stream with the renderer's failure events).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from smg.pipeline.parsers.types import CallDelta, ParseDelta

MAX_SSE_LINE = 4 * 1024 * 1024  # bytes one SSE line may hold before it ends (a bound, not a guess)


class ChatAnswerError(ValueError):
    """A worker's answer that is not a chat completion (or chunk) of OpenAI's shape."""


@dataclass(frozen=True, slots=True)
class ChatStep:
    delta: ParseDelta
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    # the stop string that ended the answer (vLLM's `stop_reason`, SGLang's `matched_stop`)
    matched_stop: str | None = None


def _matched_stop(choice: dict[str, Any]) -> str | None:
    for name in ("stop_reason", "matched_stop"):
        value = choice.get(name)
        if isinstance(value, str):
            return value
    return None


def whole_step(body: Any) -> ChatStep:
    """The one step of a whole `chat.completion` (its first choice)."""
    choice = _first_choice(body)
    if choice is None:
        raise ChatAnswerError("a chat completion without choices")
    message = _obj(choice.get("message"), "choices[0].message")
    calls = tuple(
        CallDelta(
            index=i,
            id=_str(call.get("id"), "tool_calls[].id") or f"call_{i}",
            name=_str(_obj(call.get("function"), "function").get("name"), "function.name"),
            arguments=_str(call["function"].get("arguments"), "function.arguments") or "",
        )
        for i, call in enumerate(_list(message.get("tool_calls"), "tool_calls"))
    )
    return ChatStep(
        ParseDelta(
            normal_text=_str(message.get("content"), "content") or "",
            reasoning_text=_str(message.get("reasoning_content"), "reasoning_content") or "",
            calls=calls,
        ),
        _str(choice.get("finish_reason"), "finish_reason"),
        _usage(body),
        _matched_stop(choice),
    )


def chunk_step(chunk: Any) -> ChatStep:
    """The step of one streamed `chat.completion.chunk` (a usage-only chunk has no choice)."""
    choice = _first_choice(chunk)
    if choice is None:
        return ChatStep(ParseDelta(), None, _usage(chunk))
    delta = _obj(choice.get("delta") or {}, "choices[0].delta")
    calls = []
    for call in _list(delta.get("tool_calls"), "tool_calls"):
        call = _obj(call, "tool_calls[]")
        index = call.get("index")
        if not isinstance(index, int):
            raise ChatAnswerError("a streamed tool call without an integer index")
        fn = _obj(call.get("function") or {}, "function")
        calls.append(
            CallDelta(
                index=index,
                id=_str(call.get("id"), "tool_calls[].id"),
                name=_str(fn.get("name"), "function.name"),
                arguments=_str(fn.get("arguments"), "function.arguments") or "",
            )
        )
    return ChatStep(
        ParseDelta(
            normal_text=_str(delta.get("content"), "content") or "",
            reasoning_text=_str(delta.get("reasoning_content"), "reasoning_content") or "",
            calls=tuple(calls),
        ),
        _str(choice.get("finish_reason"), "finish_reason"),
        _usage(chunk),
        _matched_stop(choice),
    )


class SseReader:
    """Bytes of an event stream in, its `data:` payloads out (`payload_json` parses each: the
    good ones before a bad one can still be shown); `done` once the worker sent `data: [DONE]`.
    The same payloads however the bytes are chunked."""

    __slots__ = ("_buf", "done")

    def __init__(self) -> None:
        self._buf = b""
        self.done = False

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if len(self._buf) > MAX_SSE_LINE:
            raise ChatAnswerError(f"an event-stream line longer than {MAX_SSE_LINE} bytes")
        out: list[bytes] = []
        for line in lines:
            line = line.rstrip(b"\r")
            if self.done or not line.startswith(b"data:"):
                continue  # comments, `event:` lines, blank separators
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            out.append(payload)
        return out


def payload_json(payload: bytes) -> Any:
    """One event-stream payload, parsed."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise ChatAnswerError("an event-stream payload that is not JSON") from None


def _first_choice(body: Any) -> dict[str, Any] | None:
    choices = _list(_obj(body, "answer").get("choices"), "choices")
    for choice in choices:
        if _obj(choice, "choices[]").get("index", 0) == 0:
            return choice
    return None


def _usage(body: dict[str, Any]) -> dict[str, Any] | None:
    usage = body.get("usage")
    return None if usage is None else _obj(usage, "usage")


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ChatAnswerError(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ChatAnswerError(f"{where} is not a list")
    return value


def _str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ChatAnswerError(f"{where} is not a string")
    return value
