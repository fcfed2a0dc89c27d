"""Gemini answers as OpenAI chat completions: whole, streamed, and errors (pure; no IO).

A `GenerateContentResponse` holds `candidates` (each `content.parts`, a `finishReason`, an
`index`), `usageMetadata` and, when the prompt itself was blocked, `promptFeedback.blockReason`
with no candidates. Parts are `text` (`thought: true` marks the model's thinking, which becomes
`reasoning_content`) or `functionCall` `{name, args}` (a tool call; Gemini gives it no id, so one
is made: `call_<id>`). Streaming (`:streamGenerateContent?alt=sse`) sends one such response per
SSE `data:` frame, each a piece of every candidate; `usageMetadata` is cumulative, so the last
one counts.

Errors are `{"error": {"code": 429, "message": ..., "status": "RESOURCE_EXHAUSTED", "details":
[...]}}`: the HTTP status is kept, `status` picks a stable OpenAI `code`, a `RetryInfo` detail's
`retryDelay` is added to the message, and anything shaped like a Google API key is masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from smg.errors import ApiError
from smg.pipeline.chat_answer import ChatAnswerError, SseReader, payload_json
from smg.pipeline.providers.base import ProviderStreamError

FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}  # OTHER, MALFORMED_FUNCTION_CALL, FINISH_REASON_UNSPECIFIED...: "stop"
# (HTTP status, Gemini status) -> OpenAI code; the HTTP status alone when the pair is not listed
CODE_BY_STATUS = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "model_not_found",
    408: "timeout",
    413: "request_too_large",
    429: "rate_limit_exceeded",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout",
}
KEY_LIKE = re.compile(r"AIza[0-9A-Za-z_\-]{20,}|([?&]key=)[^&\s\"']+")
DONE = b"data: [DONE]\n\n"


def finish_reason(reason: Any, called: bool) -> str:
    """The OpenAI finish reason of a Gemini one; a candidate that called a tool: tool_calls."""
    mapped = FINISH.get(reason, "stop") if isinstance(reason, str) else "stop"
    return "tool_calls" if called and mapped == "stop" else mapped


def usage(meta: Any) -> dict[str, Any] | None:
    """OpenAI usage from `usageMetadata` (thinking counts as completion, as OpenAI's reasoning)."""
    if not isinstance(meta, dict):
        return None
    prompt = _count(meta.get("promptTokenCount"))
    thoughts = _count(meta.get("thoughtsTokenCount"))
    completion = _count(meta.get("candidatesTokenCount")) + thoughts
    total = _count(meta.get("totalTokenCount")) or prompt + completion
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
    }
    if thoughts:
        out["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    cached = _count(meta.get("cachedContentTokenCount"))
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def error_json(status: int, body: bytes) -> bytes:
    """The OpenAI error body for a Gemini error answer of HTTP `status`."""
    return upstream_error(status, _loads(body)).to_json()


def upstream_error(status: int, data: Any) -> ApiError:
    err = data.get("error") if isinstance(data, dict) else None
    err = err if isinstance(err, dict) else {}
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = f"Gemini answered HTTP {status}"
    reason = _detail(err, "ErrorInfo", "reason")
    code = CODE_BY_STATUS.get(status, "upstream_error" if status >= 500 else "invalid_request")
    if reason in ("API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED"):
        code = "invalid_api_key"  # Gemini reports a bad key as 400 INVALID_ARGUMENT
    delay = _detail(err, "RetryInfo", "retryDelay")
    if isinstance(delay, str) and delay and delay not in message:
        message = f"{message} (retry after {delay})"
    # types as smg's own errors (and OpenAI's) for the same codes: key and model errors are
    # invalid_request_error, an upstream's 5xx is server_error
    kind = "invalid_request_error" if status in (400, 401, 404) else None
    kind = "server_error" if status >= 500 else kind
    return ApiError(status, code, mask_keys(message), type=kind)


def mask_keys(text: str) -> str:
    return KEY_LIKE.sub(lambda m: (m.group(1) or "") + "***", text)


def message_of(candidate: dict[str, Any], new_id: Callable[[], str]) -> dict[str, Any]:
    """The OpenAI assistant message of one whole candidate."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in parts_of(candidate):
        if "functionCall" in part:
            calls.append(tool_call(part, new_id))
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") is True else texts).append(part["text"])
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def completion(
    data: dict[str, Any], *, model: str, created: int, new_id: Callable[[], str]
) -> dict[str, Any]:
    """The OpenAI chat completion of a whole `GenerateContentResponse`."""
    choices = []
    for k, candidate in enumerate(_candidates(data)):
        message = message_of(candidate, new_id)
        choices.append(
            {
                "index": _index(candidate, k),
                "message": message,
                "finish_reason": finish_reason(
                    candidate.get("finishReason"), "tool_calls" in message
                ),
                "logprobs": None,
            }
        )
    if not choices:  # the prompt was blocked (promptFeedback.blockReason): nothing was generated
        choices.append(
            {
                "index": 0,
                "message": {"role": "assistant", "content": None},
                "finish_reason": "content_filter",
                "logprobs": None,
            }
        )
    out: dict[str, Any] = {
        "id": f"chatcmpl-{new_id()}",
        "object": "chat.completion",
        "created": created,
        "model": model_of(data, model),
        "choices": choices,
    }
    counted = usage(data.get("usageMetadata"))
    if counted is not None:
        out["usage"] = counted
    return out


def tool_call(part: dict[str, Any], new_id: Callable[[], str]) -> dict[str, Any]:
    """The OpenAI tool call of a `functionCall` part; its `thoughtSignature` rides along in
    `extra_content.google.thought_signature`, where Gemini's OpenAI-compatible API puts it."""
    call = part.get("functionCall")
    call = call if isinstance(call, dict) else {}
    name = call.get("name")
    args = call.get("args")
    given = call.get("id")  # newer models may carry one
    out: dict[str, Any] = {
        "id": f"call_{given}" if isinstance(given, str) and given else f"call_{new_id()}",
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else "",
            "arguments": orjson.dumps(args if isinstance(args, dict) else {}).decode(),
        },
    }
    signature = part.get("thoughtSignature")
    if isinstance(signature, str) and signature:
        out["extra_content"] = {"google": {"thought_signature": signature}}
    return out


def parts_of(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def model_of(data: dict[str, Any], fallback: str) -> str:
    """The answer's `modelVersion` (the whole answer's only model name), else `fallback`."""
    version = data.get("modelVersion")
    return version if isinstance(version, str) and version else fallback


def _candidates(data: dict[str, Any]) -> list[dict[str, Any]]:
    cands = data.get("candidates")
    return [c for c in cands if isinstance(c, dict)] if isinstance(cands, list) else []


def _index(candidate: dict[str, Any], default: int) -> int:
    index = candidate.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else default


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _detail(err: dict[str, Any], kind: str, key: str) -> Any:
    details = err.get("details")
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("." + kind):
            return detail.get(key)
    return None


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


class GeminiStream:
    """One streamed Gemini answer (SSE frames of `GenerateContentResponse`) as OpenAI
    `chat.completion.chunk` frames: per candidate a role chunk first, then content, reasoning and
    tool-call deltas, then its finish chunk; at `close()` one usage chunk (`choices: []`, from the
    last `usageMetadata`) and `[DONE]`. The same output however the input bytes are split."""

    def __init__(self, model: str, *, created: int, new_id: Callable[[], str]) -> None:
        self._model = model
        self._created = created
        self._new_id = new_id
        self._id = f"chatcmpl-{new_id()}"
        self._reader = SseReader()
        self._started: set[int] = set()
        self._calls: dict[int, int] = {}  # candidate index -> tool calls sent
        self._finished: set[int] = set()
        self._usage: dict[str, Any] | None = None
        self._error: ApiError | None = None

    def feed(self, data: bytes) -> bytes:
        if self._error is not None:
            return b""
        try:
            payloads = self._reader.feed(data)
        except ChatAnswerError as exc:
            self._error = ApiError(502, "upstream_error", f"Gemini stream: {exc}")
            return b""
        out = bytearray()
        for payload in payloads:
            try:
                frame = payload_json(payload)
            except ChatAnswerError as exc:
                self._error = ApiError(502, "upstream_error", f"Gemini stream: {exc}")
                break
            if not isinstance(frame, dict):
                continue
            if "error" in frame:
                err = frame["error"]
                status = err.get("code") if isinstance(err, dict) else None
                status = status if isinstance(status, int) and 400 <= status < 600 else 502
                self._error = upstream_error(status, frame)
                break
            out += self._frame(frame)
        return bytes(out)

    def close(self) -> bytes:
        if self._error is not None:
            err = self._error
            raise ProviderStreamError(err.message, status=err.status, code=err.code)
        if not self._finished or self._started - self._finished:
            raise ProviderStreamError("the Gemini stream ended before its finish reason")
        out = b""
        if self._usage is not None:
            out = self._chunk([], usage=self._usage)
        return out + DONE

    def _frame(self, frame: dict[str, Any]) -> bytes:
        counted = usage(frame.get("usageMetadata"))
        if counted is not None:
            self._usage = counted
        out = bytearray()
        candidates = _candidates(frame)
        feedback = frame.get("promptFeedback")
        if not candidates and isinstance(feedback, dict) and feedback.get("blockReason"):
            candidates = [{"index": 0, "finishReason": "SAFETY"}]  # the prompt was blocked
        for k, candidate in enumerate(candidates):
            index = _index(candidate, k)
            for part in parts_of(candidate):
                if "functionCall" in part:
                    n = self._calls.get(index, 0)
                    self._calls[index] = n + 1
                    call = tool_call(part, self._new_id)
                    out += self._delta(index, {"tool_calls": [{"index": n, **call}]})
                elif isinstance(part.get("text"), str) and part["text"]:
                    key = "reasoning_content" if part.get("thought") is True else "content"
                    out += self._delta(index, {key: part["text"]})
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason and index not in self._finished:
                out += self._delta(index, {})  # the role chunk, if nothing came before
                self._finished.add(index)
                finish = finish_reason(reason, self._calls.get(index, 0) > 0)
                out += self._chunk([{"index": index, "delta": {}, "finish_reason": finish}])
        return bytes(out)

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        out = b""
        if index not in self._started:
            self._started.add(index)
            role = {"role": "assistant", "content": ""}
            out = self._chunk([{"index": index, "delta": role, "finish_reason": None}])
        if delta:
            out += self._chunk([{"index": index, "delta": delta, "finish_reason": None}])
        return out

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
