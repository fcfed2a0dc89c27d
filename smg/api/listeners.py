"""The gateway's listener helpers: the listen backlog and the open-file limit of the data port
(smg/edge's, opened in smg/app/edge_listener.py), the Prometheus `/metrics` listener, and the
port an aiohttp site actually bound."""

from __future__ import annotations

import resource
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from smg.config import ObservabilityConfig

# aiohttp's default listen backlog (128) overflows at a few hundred concurrent connects.
BACKLOG = 4096


def open_file_limit() -> int:
    """Raise this process's soft open-file limit to the hard one (as Go's runtime does: every
    connection is a file descriptor) and return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


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
