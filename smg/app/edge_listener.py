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
from smg.api.edge_routes import EdgeRoutes, serves
from smg.config import GatewayConfig
from smg.edge.h1 import Limits
from smg.edge.server import EdgeServer, Timeouts

_OFF_S = 365 * 86400.0  # a timeout the config turned off (0): the guard's sweeper has none either


def edge_server(
    cfg: GatewayConfig, routes: EdgeRoutes, guard: ConnectionGuard, runner: web.AppRunner
) -> EdgeServer:
    assert runner.server is not None
    lim = cfg.limits
    # the routes bound a body by --max-payload-size / the body budget with their own errors;
    # the parser's cap only stops what they would never read
    max_body = max(cfg.server.max_payload_size, guard.budget.largest) + 65536
    return EdgeServer(
        routes.handle,
        limits=Limits(max_body=max_body),
        timeouts=Timeouts(
            header=lim.header_timeout_secs or _OFF_S,
            keep_alive=lim.keepalive_timeout_secs,
            body=lim.body_timeout_secs or _OFF_S,
            write=lim.write_timeout_secs or _OFF_S,
        ),
        native=serves,
        handoff=guard.factory(runner.server),
        watcher=guard,
    )
