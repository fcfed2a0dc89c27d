"""Stand-in for OpenAI's API (`smg sim --provider openai`): its documented wire format.

`Authorization: Bearer <key>` (401 `invalid_api_key` in OpenAI's error shape otherwise);
GET /v1/models (`{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}`);
POST /v1/chat/completions whole or streamed (`chat.completion.chunk` SSE, `data: [DONE]`, usage
when `stream_options.include_usage`); `SIM_STATUS: 429` answers OpenAI's rate-limit error with
`retry-after`, 500/503 its server error.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from smg.config import SimConfig
from smg.sim.chat_script import stream_deltas
from smg.sim.provider_common import RETRY_AFTER_S, StandIn, scripted_status, words

_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def error(status: int, message: str) -> web.Response:
    kind, code = _ERRORS.get(status, ("server_error", None))
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"retry-after": RETRY_AFTER_S} if status in (429, 503) else {}
    return web.json_response(body, status=status, headers=headers)


class OpenAIStandIn(StandIn):
    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg, "openai")

    def _auth(self, request: web.Request) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        key = auth[7:] if auth.lower().startswith("bearer ") else None
        if self.key_ok(request, key):
            return None
        return error(401, "Incorrect API key provided. You can find your API key at "
                     "https://platform.openai.com/account/api-keys.")  # fmt: skip

    async def models(self, request: web.Request) -> web.Response:
        refused = self._auth(request)
        if refused is not None:
            return refused
        ids = (self.cfg.model, *self.cfg.adapters)
        data = [
            {"id": i, "object": "model", "created": 1700000000, "owned_by": "openai"} for i in ids
        ]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        refused = self._auth(request)
        if refused is not None:
            return refused
        try:
            body = json.loads(await request.read())
        except ValueError:
            return error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(400, "'messages' is a required property")
        self.bodies.append(body)
        status = scripted_status(body)
        if status is not None:
            return error(status, f"scripted status {status}: Rate limit reached for requests"
                         if status == 429 else f"scripted status {status}")  # fmt: skip
        scripted = self.reply(body)
        base = {"id": f"chatcmpl-sim{self.calls}", "created": int(time.time()),
                "model": body.get("model") or self.cfg.model}  # fmt: skip
        completion = len(words(scripted.text))
        usage = {"prompt_tokens": 10, "completion_tokens": completion,
                 "total_tokens": 10 + completion}  # fmt: skip
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": scripted.content}
            if scripted.tool_calls:
                message["tool_calls"] = list(scripted.tool_calls)
            choice = {"index": 0, "message": message, "logprobs": None,
                      "finish_reason": scripted.finish_reason}  # fmt: skip
            return web.json_response(
                {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            chunk = {**base, "object": "chat.completion.chunk", "choices": [choice]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        await send({"role": "assistant", "content": ""})
        for delta in stream_deltas(scripted):
            if "content" in delta:
                for piece in words(delta["content"]):
                    await send({"content": piece})
            else:
                await send(delta)
        await send({}, scripted.finish_reason)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk: dict[str, Any] = {
                **base,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": usage,
            }
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def build_app(cfg: SimConfig) -> web.Application:
    standin = OpenAIStandIn(cfg)
    return standin.app("/v1/chat/completions", standin.chat)
