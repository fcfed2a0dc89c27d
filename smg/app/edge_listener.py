"""The gateway's listeners: the client port, where the lean edge (smg/edge) is in front, and the
Prometheus one (`Listeners`, opened and closed by the gateway's `_serve`).

It answers the hot inference routes itself (smg/api/edge_routes.py) and hands every other
connection, at the first request it cannot answer, to the aiohttp application's protocol (the
connection guard's `EdgeHandler`), so both serve one port. The connection guard watches both
kinds: one connection cap, one sweeper (slowloris heads, stalled bodies, clients that take no
answer bytes), one set of `smg_http_connections_*` series.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from aiohttp import web

from smg.api.connection_guard import ConnectionGuard
from smg.api.edge_routes import ROUTES, EdgeRoutes
from smg.api.listeners import BACKLOG, start_metrics
from smg.clock import Clock
from smg.config import GatewayConfig
from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.edge.h1 import Limits
from smg.edge.handoff import native_routes
from smg.edge.server import EdgeServer, Timeouts

log = structlog.get_logger("smg.gateway")

_OFF_S = 365 * 86400.0  # the edge's own timers the guard's sweeper stands for
# After answering without reading a body (413, 401, 503...), aiohttp reads and drops what the
# client still sends for this long, so the client sees the answer instead of a reset; short, as
# a sender of an endless body holds its connection (and our CPU) that long.
_LINGER_S = 2.0
_EDGE_CLOSE_S = 1.0  # the listener's close after the drain: idle connections, late answers
FIRST_CHECKS_WAIT_S = 10.0  # --workers N: a process waits this long for its workers' first checks
FIRST_CHECKS_POLL_S = 0.05


def edge_server(
    cfg: GatewayConfig, routes: EdgeRoutes, guard: ConnectionGuard, runner: web.AppRunner
) -> EdgeServer:
    assert runner.server is not None
    lim = cfg.limits
    # the routes bound a body by --max-payload-size / the body budget with their own errors;
    # the parser's cap only stops what they would never read
    max_body = max(cfg.server.max_payload_size, guard.budget.largest) + 65536
    # The guard sweeps the edge's connections for stalled bodies and writes, and for slowloris
    # heads (counting each cut once, in smg_http_connections_cut): the edge's body and write
    # timers are off, its head timer is a backstop a little past the guard's (it also bounds
    # the TLS handshake, which comes before the guard sees the connection).
    header = lim.header_timeout_secs + 2 * guard.interval_s if lim.header_timeout_secs else _OFF_S
    return EdgeServer(
        routes.handle,
        limits=Limits(max_body=max_body),
        timeouts=Timeouts(
            header=header, keep_alive=lim.keepalive_timeout_secs, body=_OFF_S, write=_OFF_S
        ),
        native=native_routes({(b"POST", path) for path in ROUTES}),
        handoff=guard.factory(runner.server),
        watcher=guard,
    )


class Listeners:
    """The client port and the metrics port of one serving period: `setup` builds the aiohttp
    application's runner and the edge in front of it, `listen` opens both ports, `close` (after
    the drain) closes the edge, then the connections handed to aiohttp, then the metrics port."""

    def __init__(
        self,
        cfg: GatewayConfig,
        guard: ConnectionGuard,
        *,
        tls: ssl.SSLContext | None,
        reuse_port: bool,
    ) -> None:
        self.cfg = cfg
        self.guard = guard
        self.tls = tls  # the gateway's certificate, for both ports
        self.reuse_port = reuse_port  # one of `--workers N` processes: the port is shared
        self.web_runner: web.AppRunner | None = None
        self.edge: EdgeServer | None = None
        self.metrics_runner: web.AppRunner | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None

    async def setup(self, app: web.Application, routes: EdgeRoutes) -> None:
        self.web_runner = web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=True,
            keepalive_timeout=self.cfg.limits.keepalive_timeout_secs,
            lingering_time=_LINGER_S,
        )
        await self.web_runner.setup()
        self.edge = edge_server(self.cfg, routes, self.guard, self.web_runner)

    async def listen(self, render: Callable[[], bytes], metrics_gate: Sequence[Any]) -> None:
        """Open the client listener and the metrics one (`render` behind `metrics_gate`)."""
        assert self.edge is not None
        cfg = self.cfg
        await self.edge.start(
            cfg.server.host,
            cfg.server.port,
            ssl=self.tls,
            backlog=BACKLOG,
            reuse_port=self.reuse_port,
        )
        self.port = self.edge.port
        # one of `--workers N` processes: its metrics listener is the parent's private one on
        # 127.0.0.1 (child_argv), scraped in plain HTTP; the parent serves the public one (TLS)
        metrics_tls = None if self.reuse_port else self.tls
        metrics = await start_metrics(
            cfg.observability, cfg.server.host, render, metrics_gate, ssl_context=metrics_tls
        )
        if metrics is not None:
            self.metrics_runner, self.metrics_port = metrics
        log.info(
            "gateway_listening",
            host=cfg.server.host,
            port=self.port,
            tls=self.tls is not None,
            metrics_port=self.metrics_port,
            policy=cfg.routing.policy,
            workers=len(cfg.workers.worker_urls),
            max_connections=self.guard.max_connections,
        )

    async def close(self) -> None:
        if self.edge is not None:
            await self.edge.close(_EDGE_CLOSE_S)  # drained: what is left is idle or cut
        if self.web_runner is not None:
            await self.web_runner.cleanup()  # and the connections handed to aiohttp
        if self.metrics_runner is not None:
            await self.metrics_runner.cleanup()


async def first_checks(registry: SnapshotCell[RegistrySnapshot], clock: Clock) -> None:
    """One of `--workers N` processes listens once its start-up workers have had their first
    health checks (at most FIRST_CHECKS_WAIT_S): the kernel gives a listening process its
    share of connections at once, so one that listened earlier (a restarted one under load
    too) answered them 503 while its siblings served."""
    deadline = clock.now() + FIRST_CHECKS_WAIT_S
    while clock.now() < deadline and any(
        w.health is HealthStatus.PENDING for w in registry.value.workers
    ):
        await clock.sleep(FIRST_CHECKS_POLL_S)
