"""The gateway's extra listener (Prometheus `/metrics`) and the port a site actually bound."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from smg.config import ObservabilityConfig


def bound_port(site: web.TCPSite) -> int | None:
    server = site._server
    if server is None:
        return None
    for sock in getattr(server, "sockets", ()):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            return int(sock.getsockname()[1])
    return None


async def start_metrics(
    obs: ObservabilityConfig,
    server_host: str,
    render: Callable[[], bytes],
    middlewares: Sequence[Any] = (),
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[web.AppRunner, int | None] | None:
    """Serve `render()` at /metrics on the Prometheus listener (port 0 in the config: none),
    behind `middlewares` (the auth gate: see smg/api/middleware.metrics_middleware), over TLS
    with the gateway's certificate when it has one (metrics name workers and models)."""
    if obs.prometheus_port <= 0:
        return None
    host = obs.prometheus_host or ("::" if ":" in server_host else "0.0.0.0")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    app = web.Application(middlewares=list(middlewares))
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner, host, obs.prometheus_port, reuse_address=True, ssl_context=ssl_context
    )
    await site.start()
    return runner, bound_port(site)
