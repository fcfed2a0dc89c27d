"""The client-facing listener: the lean edge (smg/edge) owns the port.

It answers the hot inference routes itself (smg/api/edge_routes.py) and hands every other
connection, at the first request it cannot answer, to the aiohttp application's protocol (the
connection guard's `EdgeHandler`), so both serve one port. The connection guard watches both
kinds: one connection cap, one sweeper (slowloris heads, stalled bodies, clients that take no
answer bytes), one set of `smg_http_connections_*` series.
"""

from __future__ import annotations

from aiohttp import web

from smg.api.connection_guard import ConnectionGuard
from smg.api.edge_routes import ROUTES, EdgeRoutes
from smg.config import GatewayConfig
from smg.edge.h1 import Limits
from smg.edge.handoff import native_routes
from smg.edge.server import EdgeServer, Timeouts

_OFF_S = 365 * 86400.0  # the edge's own timers the guard's sweeper stands for


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
