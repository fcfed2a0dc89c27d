"""The gateway's aiohttp listeners: `start_site` (a site whose protocols the connection guard
makes; the data port itself is smg/edge's, smg/app/edge_listener.py), the Prometheus
`/metrics` one, and the port a site actually bound."""

from __future__ import annotations

import asyncio
import resource
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from smg.config import ObservabilityConfig

# aiohttp's default listen backlog (128) overflows at a few hundred concurrent connects.
BACKLOG = 4096


class _Site(web.TCPSite):
    """A TCPSite whose connections are made by `protocol_factory` instead of the runner's own
    server (aiohttp's `TCPSite.start`, with the factory and the TLS handshake deadline)."""

    __slots__ = ("_factory", "_handshake_timeout_s")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        protocol_factory: Callable[[], Any],
        handshake_timeout_s: float | None,
        **site_options: Any,
    ) -> None:
        super().__init__(runner, host, port, **site_options)
        self._factory = protocol_factory
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner (cleanup closes it)
        extra: dict[str, Any] = {}
        if self._ssl_context is not None and self._handshake_timeout_s:
            extra["ssl_handshake_timeout"] = self._handshake_timeout_s
        self._server = await asyncio.get_running_loop().create_server(
            self._factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            reuse_port=self._reuse_port,
            **extra,
        )


async def start_site(
    runner: web.AppRunner,
    host: str,
    port: int,
    *,
    protocol_factory: Callable[[], Any] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout_s: float | None = None,
    backlog: int = BACKLOG,
    reuse_port: bool = False,
) -> web.TCPSite:
    """Listen on (host, port) for `runner`'s app, over TLS with `ssl_context`. Connections are
    made by `protocol_factory` (the connection guard's) when given; a TLS handshake must end
    within `handshake_timeout_s` (its bytes come before any HTTP deadline can apply). With
    `reuse_port` (`--workers N`), the port is shared by every process of the group."""
    options: dict[str, Any] = {
        "ssl_context": ssl_context,
        "backlog": backlog,
        "reuse_address": True,
        "reuse_port": reuse_port or None,
    }
    site: web.TCPSite
    if protocol_factory is None:
        site = web.TCPSite(runner, host, port, **options)
    else:
        site = _Site(
            runner,
            host,
            port,
            protocol_factory=protocol_factory,
            handshake_timeout_s=handshake_timeout_s,
            **options,
        )
    await site.start()
    return site


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
