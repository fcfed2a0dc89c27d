"""What the provider stand-ins (`smg sim --provider ...`) share: the scripted reply of a request,
the `SIM_STATUS: <code>` prefix that makes one answer an error, the keys seen, and the server.

A stand-in speaks its vendor's documented wire format only; which vendor is the caller's module
(provider_openai.py, provider_anthropic.py). `GET /sim/keys` lists the keys it was sent, each
with its path (the tests of bring-your-own-key read it), `GET /sim/requests` the last request
bodies, `GET /sim/last-trace` the last chat's `traceparent` header.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from smg.config import SimConfig
from smg.sim.chat_script import ScriptedAnswer, answer, scripted_reply
from smg.sim.script import Script, parse_script

_STATUS = re.compile(r"^\s*SIM_STATUS:\s*(\d{3})")
RETRY_AFTER_S = "1"  # what a scripted 429/529 says in retry-after
DEFAULT_REPLY = "Hello from the {vendor} stand-in."
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_KEPT = 64  # keys and bodies remembered for /sim/*


class StandIn:
    """The state both vendors' handlers share: config, script, what was seen."""

    def __init__(self, cfg: SimConfig, vendor: str) -> None:
        self.cfg = cfg
        self.vendor = vendor
        self.script = parse_script(Path(cfg.script).read_text()) if cfg.script else Script()
        self.keys_seen: deque[tuple[str, str | None]] = deque(maxlen=_KEPT)  # (path, key)
        self.bodies: deque[Any] = deque(maxlen=_KEPT)
        self.calls = 0
        self.last_traceparent = ""  # the W3C traceparent header of the last chat (tests)

    def key_ok(self, request: web.Request, key: str | None) -> bool:
        self.keys_seen.append((request.path, key))
        self.last_traceparent = request.headers.get("traceparent", "")
        return key is not None and key in self.cfg.provider_keys

    def reply(self, body: dict[str, Any]) -> ScriptedAnswer:
        self.calls += 1
        text = scripted_reply(body, self.script) or DEFAULT_REPLY.format(vendor=self.vendor)
        return answer(text, bool(body.get("tools")), f"{self.calls}_")

    def app(self, chat_path: str, chat: Handler) -> web.Application:
        """The vendor's routes (/v1/models and its chat path) and the stand-in's own /sim/*."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post(chat_path, chat)
        app.router.add_get("/sim/keys", self.keys)
        app.router.add_get("/sim/requests", self.requests)
        app.router.add_get("/sim/last-trace", self.last_trace)
        return app

    async def models(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def keys(self, request: web.Request) -> web.Response:
        seen = [{"path": path, "key": key} for path, key in self.keys_seen]
        return web.json_response({"keys": seen})

    async def requests(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": list(self.bodies)})

    async def last_trace(self, request: web.Request) -> web.Response:
        return web.json_response({"traceparent": self.last_traceparent})


def scripted_status(body: dict[str, Any]) -> int | None:
    """The status a request's last user message asks for with `SIM_STATUS: 429` (etc.)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(
                    p.get("text", "")
                    for p in content
                    if isinstance(p, dict) and p.get("type") == "text"
                )
            match = _STATUS.match(content) if isinstance(content, str) else None
            return int(match.group(1)) if match else None
    return None


def words(text: str) -> list[str]:
    """A text in the pieces a stream sends (words with their spaces)."""
    return re.findall(r"\S+\s*|\s+", text)


def serve(build: Callable[[SimConfig], web.Application], cfg: SimConfig) -> Any:
    """A coroutine running the stand-in on (host, port) until cancelled."""

    async def run() -> None:
        runner = web.AppRunner(build(cfg), handler_cancellation=True, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, cfg.host, cfg.port)
            await site.start()
            port = runner.addresses[0][1]
            print(
                f"smg sim listening on http://{cfg.host}:{port} provider={cfg.provider} "
                f"model={cfg.model}",
                flush=True,
            )
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    return run()
