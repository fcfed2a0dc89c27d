#!/usr/bin/env python3
"""CPU-µs per request of the auth gate, in process: the decision alone and the whole edge
middleware, with and without keys, next to what the old `--api-key` check cost.

Requests are aiohttp's own `Request` objects resolved against the gateway's router (real header
multidicts, real match info), so nothing is faked but the socket. The middleware is driven
without an event loop round trip (its handler answers at once), which isolates its own CPU.

    .venv/bin/python bench/auth_overhead.py              # ~20 s
    .venv/bin/python bench/auth_overhead.py --n 200000   # steadier

Rows (best of --reps, µs per request, process CPU time):
  before: check_key          the old `Authorization` startswith + `!=` (copied below)
  gate: <case>               route class + decision (what the gate adds per request)
  middleware: <case>         the whole edge middleware (request id, gate, metrics, audit)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from smg import errors
from smg.api.auth import AuthGate
from smg.api.middleware import edge_middleware
from smg.config import AuthConfig, GatewayConfig, ServerConfig
from smg.core.auth import Gate
from smg.core.snapshots import RegistrySnapshot
from smg.metrics import Metrics

KEY = "sk-bench-0123456789abcdef0123456789abcdef"
CP = f"ops:Ops:admin:{'a' * 40}"
BODY = b'{"ok": true}'


def old_check_key(request: Any, api_key: str) -> None:
    """The check this gate replaces (smg/api/middleware.py before issue 10)."""
    auth = request.headers.get("Authorization")
    if not auth or not auth.startswith("Bearer "):
        raise errors.missing_api_key()
    if auth[7:].strip() != api_key:
        raise errors.wrong_api_key()


def app_and_gate(
    api_key: str | None, cp_keys: tuple[str, ...] = ()
) -> tuple[web.Application, AuthGate]:
    cfg = GatewayConfig(
        server=ServerConfig(host="127.0.0.1", api_key=api_key),
        auth=AuthConfig(control_plane_api_keys=cp_keys, disable_audit_logging=True),
    )
    gate = AuthGate(Gate.from_config(cfg), time.monotonic, audit=False)
    metrics = Metrics(lambda: RegistrySnapshot())
    app = web.Application(middlewares=[edge_middleware(gate, metrics)])
    answer = web.Response(body=BODY, content_type="application/json")

    async def handler(_: web.Request) -> web.Response:
        return answer

    for path in ("/v1/chat/completions", "/workers"):
        app.router.add_post(path, handler)
    app.router.add_get("/health", handler)
    app.freeze()
    return app, gate


def request(app: web.Application, method: str, path: str, headers: dict[str, str]) -> web.Request:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        ("127.0.0.1", 40000) if name == "peername" else default
    )
    req = make_mocked_request(method, path, headers=headers, app=app, transport=transport)
    match = asyncio.run(app.router.resolve(req))
    req._match_info = match  # type: ignore[attr-defined]
    match.add_app(app)
    return req


def per_call_us(fn: Callable[[], Any], n: int, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def middleware_us(loop: asyncio.AbstractEventLoop, mw: Any, req: web.Request, handler: Any,
                  n: int, reps: int) -> float:  # fmt: skip
    """Awaits complete in place (the handler answers at once): no loop round trips counted."""

    async def run() -> float:
        best = float("inf")
        for _ in range(reps):
            t0 = time.process_time()
            for _ in range(n):
                await mw(req, handler)
            best = min(best, (time.process_time() - t0) / n * 1e6)
        return best

    return loop.run_until_complete(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="requests per rep")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    loop = asyncio.new_event_loop()  # the middleware reads the running loop's clock
    asyncio.set_event_loop(loop)

    json_ct = {"Content-Type": "application/json", "Host": "127.0.0.1:30000"}
    keyed_app, keyed = app_and_gate(KEY)
    open_app, keyless = app_and_gate(None)
    cp_app, cp_gate = app_and_gate(KEY, (CP,))
    with_key = {**json_ct, "Authorization": f"Bearer {KEY}"}
    chat = "/v1/chat/completions"
    cases: dict[str, tuple[web.Application, AuthGate, str, str, dict[str, str]]] = {
        "data plane, --api-key": (keyed_app, keyed, "POST", chat, with_key),
        "data plane, keyless loopback": (open_app, keyless, "POST", chat, json_ct),
        "control plane key": (cp_app, cp_gate, "POST", "/workers",
                              {**json_ct, "Authorization": f"Bearer {'a' * 40}"}),
        "public /health (no gate work)": (keyed_app, keyed, "GET", "/health", {"Host": "x"}),
    }  # fmt: skip
    rows: list[tuple[str, float]] = []
    old_req = request(keyed_app, "POST", chat, with_key)
    rows.append(
        ("before: check_key", per_call_us(lambda: old_check_key(old_req, KEY), a.n, a.reps))
    )

    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(body=BODY)

    for name, (app, gate, method, path, headers) in cases.items():
        req = request(app, method, path, headers)

        def decide(req: web.Request = req, gate: AuthGate = gate) -> None:
            cls = gate.route_class(req)
            if cls is not None and cls.value != "public":
                gate.decide(req, cls)

        rows.append((f"gate: {name}", per_call_us(decide, a.n, a.reps)))
        us = middleware_us(loop, app.middlewares[0], req, handler, a.n // 2, a.reps)
        rows.append((f"middleware: {name}", us))
    print(f"| case (n={a.n}, best of {a.reps}) | CPU-µs per request |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
