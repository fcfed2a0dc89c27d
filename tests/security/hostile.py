"""A worker the tests control: an OpenAI-compatible HTTP server on loopback, in its own thread.

It passes the gateway's health checks (`/health`, `/v1/models`) and answers the data plane as
`mode` says: a normal answer, an endless body, a stream that stalls, no answer at all, a reset
connection. Every request it receives is recorded (path, headers, body), health checks included,
so a test can see exactly what the gateway sent a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODES = ("ok", "endless", "stall", "hang", "reset", "stream_forever", "slow_whole")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int] | None = None  # the gateway's end of the connection it came on

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == low), None)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class HostileWorker:
    model: str = "m"
    mode: str = "ok"
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def data_requests(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path in ("/v1/chat/completions", "/generate")]

    def all_seen(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    # --- the server ------------------------------------------------------------------------------
    async def _record(self, request: web.Request) -> None:
        body = await request.read()
        with self._lock:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            seen = Seen(request.method, request.path, dict(request.headers), body, peer)
            self.seen.append(seen)

    async def _health(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    async def _generate(self, request: web.Request) -> web.Response:
        await self._record(request)  # SGLang's native endpoint
        return web.json_response({"text": "hi", "meta_info": {"finish_reason": {"type": "stop"}}})

    async def _other(self, request: web.Request) -> web.Response:
        await self._record(request)  # load polls (/get_load, /v1/loads) and the rest
        return web.json_response({"error": "not here"}, status=404)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        mode = self.mode
        body = json.loads((await request.read()) or b"{}")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "reset":
            assert request.transport is not None
            request.transport.abort()
            await asyncio.sleep(3600)
        if mode == "endless":  # a "JSON" answer that never ends, as fast as it can go
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            chunk = b"x" * (1 << 20)
            while True:
                await resp.write(chunk)
        if mode == "slow_whole":  # a non-streamed answer whose body takes seconds to arrive
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await resp.write(b'{"id": "chatcmpl-hostile", ')
            await asyncio.sleep(3.0)
            await resp.write(b'"object": "chat.completion", "choices": []}')
            await resp.write_eof()
            return resp
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(_chunk(self.model, "first "))
            if mode == "stall":
                await asyncio.sleep(3600)
            if mode == "stream_forever":
                while True:
                    await asyncio.sleep(0.05)
                    await resp.write(_chunk(self.model, "more "))
            await resp.write(_chunk(self.model, "last"))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        return web.json_response(
            {
                "id": "chatcmpl-hostile",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hello"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    async def _serve(self, ready: threading.Event) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/generate", self._generate)
        app.router.add_route("*", "/{tail:.*}", self._other)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._stop = asyncio.Event()
        ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def start(self) -> HostileWorker:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve(ready))
            self._loop.close()

        self._thread = threading.Thread(target=run, name="hostile-worker", daemon=True)
        self._thread.start()
        if not ready.wait(10.0):
            raise RuntimeError("the hostile worker did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10.0)


def _chunk(model: str, text: str) -> bytes:
    payload = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@contextlib.contextmanager
def hostile_worker(model: str = "m", mode: str = "ok") -> Iterator[HostileWorker]:
    w = HostileWorker(model=model, mode=mode).start()
    try:
        yield w
    finally:
        w.stop()
