"""A stand-in for the Gemini API (`smg sim --provider gemini`): a real aiohttp server speaking
generativelanguage.googleapis.com's v1beta wire format, so the gateway's Gemini provider is
tested against the documented shapes with no internet.

Routes: GET `/v1beta/models` (and `/v1beta/models/{model}`), POST
`/v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse` (SSE frames ended by
CRLF CRLF, as Google's); any other `alt` streams a JSON array, as Gemini does without
`alt=sse`. With `--provider-keys` every call needs one of them in `x-goog-api-key` or `?key=`: a
missing key is Gemini's 403, a wrong one its 400 API_KEY_INVALID. What is answered:
smg.sim.gemini_replies. Like the other stand-ins, `GET /sim/keys` lists the keys it was sent
(with their paths) and `GET /sim/requests` the last request bodies.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from smg.config import SimConfig
from smg.sim import gemini_replies as replies
from smg.sim.script import Script, parse_script

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 32 * 1024 * 1024  # bytes of one request body
_KEPT = 64  # keys and bodies remembered for /sim/*


class GeminiStandIn:
    def __init__(self, cfg: SimConfig) -> None:
        self.models = (cfg.model, *cfg.adapters)
        self.accepted = tuple(k.encode() for k in cfg.provider_keys)  # none: any key, or none
        self.script = parse_script(Path(cfg.script).read_text()) if cfg.script else Script()
        self._ids = itertools.count(1)
        self.keys_seen: deque[tuple[str, str | None]] = deque(maxlen=_KEPT)  # (path, key)
        self.bodies: deque[Any] = deque(maxlen=_KEPT)

    @web.middleware
    async def check_key(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/sim/"):
            return await handler(request)
        given = request.headers.get("x-goog-api-key") or request.query.get("key")
        self.keys_seen.append((request.path, given))
        if self.accepted:
            if not given:
                return _error(replies.no_key())
            if not any(hmac.compare_digest(given.encode(), key) for key in self.accepted):
                return _error(replies.bad_key())
        return await handler(request)

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"models": [replies.model_entry(m) for m in self.models]}, dumps=_dumps
        )

    async def keys(self, request: web.Request) -> web.Response:
        seen = [{"path": path, "key": key} for path, key in self.keys_seen]
        return web.json_response({"keys": seen})

    async def requests(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": list(self.bodies)})

    async def get_model(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if model not in self.models:
            return _error(replies.unknown_model(model))
        return web.json_response(replies.model_entry(model), dumps=_dumps)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        model, _, verb = request.match_info["call"].partition(":")
        if verb not in ("generateContent", "streamGenerateContent"):
            return _error(replies.error(404, f"Method {verb!r} not found."))
        if model not in self.models:
            return _error(replies.unknown_model(model))
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(replies.error(400, "Invalid JSON payload received."))
        self.bodies.append(body)
        reply = replies.plan_reply(body, self.script)
        if reply.error is not None:
            return _error(reply.error)
        response_id = f"sim{next(self._ids):08d}"
        if verb == "generateContent":
            return web.json_response(replies.whole(reply, model, response_id), dumps=_dumps)
        sse = request.query.get("alt") == "sse"
        out = web.StreamResponse(
            headers={
                "content-type": "text/event-stream" if sse else "application/json",
                "cache-control": "no-cache",
            }
        )
        await out.prepare(request)
        if not sse:
            await out.write(b"[")
        for k, frame in enumerate(replies.frames(reply, model, response_id)):
            data = orjson.dumps(frame)
            if sse:
                await out.write(b"data: " + data + b"\r\n\r\n")
            else:
                await out.write((b",\r\n" if k else b"") + data)
            await asyncio.sleep(0)  # a frame per write, as a real stream arrives
        if reply.broken:  # cut off: the client sees the connection end mid-answer
            if request.transport is not None:
                request.transport.close()
            return out
        if not sse:
            await out.write(b"]")
        await out.write_eof()
        return out


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


def _error(body: dict[str, object]) -> web.Response:
    err = body["error"]
    status = err["code"] if isinstance(err, dict) else 500
    return web.json_response(body, status=status, dumps=_dumps)


def build_app(cfg: SimConfig) -> web.Application:
    standin = GeminiStandIn(cfg)
    app = web.Application(client_max_size=MAX_BODY, middlewares=[standin.check_key])
    app.router.add_get("/v1beta/models", standin.list_models)
    app.router.add_get("/v1beta/models/{model}", standin.get_model)
    app.router.add_post("/v1beta/models/{call}", standin.generate)
    app.router.add_get("/sim/keys", standin.keys)
    app.router.add_get("/sim/requests", standin.requests)
    return app
