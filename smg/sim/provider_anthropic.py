"""Stand-in for Anthropic's Messages API (`smg sim --provider anthropic`): its documented wire
format.

`x-api-key` (401 `authentication_error` otherwise) and `anthropic-version` (400 without it);
GET /v1/models (`{"data": [{"type": "model", "id", "display_name", "created_at"}], "has_more",
"first_id", "last_id"}`); POST /v1/messages: `max_tokens` required, `system` a string or text
blocks, messages alternating user/assistant with text, image, tool_use and tool_result blocks;
the answer a `message` (text and tool_use blocks, stop_reason, usage) or, with `stream`, the
event stream (message_start, content_block_start/delta/stop with text_delta and
input_json_delta, ping, message_delta, message_stop). Extended thinking (`thinking: {type:
enabled, budget_tokens}`, at least 1024 and under max_tokens, else its 400) puts a scripted
reply's `<think>` part first as a `thinking` block with a signature (streamed: thinking_delta,
then signature_delta); without it the model does not think. Errors are
`{"type": "error", "error": {"type", "message"}}`: `SIM_STATUS: 429` -> rate_limit_error with
retry-after, 529 -> overloaded_error, 500 -> api_error; `SIM_STATUS: 299` breaks a stream off
with an `error` event (overloaded_error) after its first text.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from smg.config import SimConfig
from smg.sim.provider_common import RETRY_AFTER_S, StandIn, scripted_status, words

VERSION = "2023-06-01"
STREAM_ERROR = 299  # a scripted status: the stream starts, then an error event
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_STOP = {"stop": "end_turn", "tool_calls": "tool_use"}


def error(status: int, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": _TYPES.get(status, "api_error"), "message": message}}
    headers = {"retry-after": RETRY_AFTER_S} if status in (429, 529) else {}
    return web.json_response(body, status=status, headers=headers)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _bad_messages(body: dict[str, Any]) -> str | None:
    """What is wrong with a request body as the Messages API would say, or None."""
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: Input should be a valid string"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind not in ("text", "image", "tool_use", "tool_result", "thinking"):
                    return f"messages.{i}.content: unknown block type {kind!r}"
        elif not isinstance(content, str):
            return f"messages.{i}.content: Input should be a valid string or list"
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict) or "input_schema" not in tool or "name" not in tool:
            return "tools: each tool needs name and input_schema"
    return _bad_thinking(body.get("thinking"), body["max_tokens"])


def _bad_thinking(thinking: Any, max_tokens: int) -> str | None:
    if thinking is None or thinking == {"type": "disabled"}:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled'"
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if max_tokens <= budget:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    return None


class AnthropicStandIn(StandIn):
    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg, "anthropic")

    def _auth(self, request: web.Request) -> web.Response | None:
        if not self.key_ok(request, request.headers.get("x-api-key")):
            return error(401, "invalid x-api-key")
        if request.headers.get("anthropic-version") != VERSION:
            return error(400, "anthropic-version: header is required")
        return None

    async def models(self, request: web.Request) -> web.Response:
        refused = self._auth(request)
        if refused is not None:
            return refused
        ids = (self.cfg.model, *self.cfg.adapters)
        data = [{"type": "model", "id": i, "display_name": i,
                 "created_at": "2025-05-14T00:00:00Z"} for i in ids]  # fmt: skip
        return web.json_response(
            {"data": data, "has_more": False, "first_id": ids[0], "last_id": ids[-1]}
        )

    async def messages(self, request: web.Request) -> web.StreamResponse:
        refused = self._auth(request)
        if refused is not None:
            return refused
        try:
            body = json.loads(await request.read())
        except ValueError:
            return error(400, "There was an error parsing the body of your request as JSON")
        if not isinstance(body, dict):
            return error(400, "the body must be an object")
        bad = _bad_messages(body)
        if bad is not None:
            return error(400, bad)
        self.bodies.append(body)
        status = scripted_status(body)
        if status is not None and status != STREAM_ERROR:
            return error(status, f"scripted status {status}")
        scripted = self.reply(body)
        blocks: list[dict[str, Any]] = []
        if scripted.reasoning and isinstance(body.get("thinking"), dict):
            if body["thinking"].get("type") == "enabled":
                blocks.append({"type": "thinking", "thinking": scripted.reasoning,
                               "signature": f"sig{self.calls}"})  # fmt: skip
        if scripted.content:
            blocks.append({"type": "text", "text": scripted.content})
        for call in scripted.tool_calls:
            fn = call["function"]
            blocks.append({"type": "tool_use", "id": "toolu_" + call["id"], "name": fn["name"],
                           "input": json.loads(fn["arguments"])})  # fmt: skip
        stop = _STOP[scripted.finish_reason]
        usage = {"input_tokens": 10, "output_tokens": len(words(scripted.text))}
        msg_id = f"msg_sim{self.calls}"
        model = body.get("model") or self.cfg.model
        if not body.get("stream"):
            return web.json_response(
                {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                 "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
            )  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start: dict[str, Any] = {"id": msg_id, "type": "message", "role": "assistant"}
        start |= {"model": model, "content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = {"input_tokens": 10, "output_tokens": 1}
        await resp.write(_event("message_start", {"message": start}))
        await resp.write(_event("ping", {}))
        for index, block in enumerate(blocks):
            if block["type"] == "thinking":
                await resp.write(_thinking_events(index, block))
            elif block["type"] == "text":
                empty = {"type": "text", "text": ""}
                await resp.write(
                    _event("content_block_start", {"index": index, "content_block": empty})
                )
                for piece in words(block["text"]):
                    delta = {"type": "text_delta", "text": piece}
                    await resp.write(
                        _event("content_block_delta", {"index": index, "delta": delta})
                    )
                    if status == STREAM_ERROR:
                        err = {"type": "overloaded_error", "message": "Overloaded"}
                        await resp.write(_event("error", {"error": err}))
                        await resp.write_eof()
                        return resp
            else:
                head = {**block, "input": {}}
                await resp.write(
                    _event("content_block_start", {"index": index, "content_block": head})
                )
                args = json.dumps(block["input"])
                for cut in range(0, len(args), 7):  # partial JSON, as the API sends it
                    delta = {"type": "input_json_delta", "partial_json": args[cut : cut + 7]}
                    await resp.write(
                        _event("content_block_delta", {"index": index, "delta": delta})
                    )
            await resp.write(_event("content_block_stop", {"index": index}))
        final = {"delta": {"stop_reason": stop, "stop_sequence": None},
                 "usage": {"output_tokens": usage["output_tokens"]}}  # fmt: skip
        await resp.write(_event("message_delta", final))
        await resp.write(_event("message_stop", {}))
        await resp.write_eof()
        return resp


def _thinking_events(index: int, block: dict[str, Any]) -> bytes:
    """A thinking block's start, its text as thinking_delta events, its signature_delta."""
    start = {"index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}
    out = [_event("content_block_start", start)]
    for piece in words(block["thinking"]):
        delta = {"type": "thinking_delta", "thinking": piece}
        out.append(_event("content_block_delta", {"index": index, "delta": delta}))
    sig = {"type": "signature_delta", "signature": block["signature"]}
    out.append(_event("content_block_delta", {"index": index, "delta": sig}))
    return b"".join(out)


def build_app(cfg: SimConfig) -> web.Application:
    standin = AnthropicStandIn(cfg)
    return standin.app("/v1/messages", standin.messages)
