"""What a client can hold on the gateway's listener: connections, time, buffered body bytes.

`ConnectionGuard` makes the listener's protocols and owns:

- `EdgeHandler`: aiohttp's `RequestHandler` plus a few counters (bytes received, requests
  started, whether one runs, the current response's writer, whether its body is being read). No
  timer and no clock read per chunk or per request;
- the connection cap: past `max_connections` a new connection gets a canned 503 and is closed
  at once, so the listen backlog keeps draining;
- the sweeper (`run`, one task the gateway's lifespan owns): every interval it samples each
  connection and lets `smg/core/conn_deadlines.py` judge it. A slowloris connection is closed,
  a stalled body gets 408, a client that takes no response bytes is aborted (its handler is
  cancelled, so its admission permit goes back);
- the request-body budget (`smg/api/body_budget.py`): `requests.read_body` takes a body's bytes
  before reading it and the handler gives them back when the response has ended.

It also watches the lean edge's connections (smg/edge; pass the guard as
`EdgeServer(watcher=guard)`): they are admitted, counted against the same cap, swept and cut
alike (`Guarded` is what both kinds offer). A connection the edge hands over to aiohttp leaves
the guard as an edge connection and comes back as an `EdgeHandler`: counted once.

Written against aiohttp 3.10-3.14's `RequestHandler` (its `_handle_request` coroutine and the
server's handler kwargs); `check_aiohttp` refuses to start on an aiohttp where they changed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol, cast

import aiohttp
import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg import errors
from smg.api.body_budget import BodyBudget
from smg.clock import Clock
from smg.config import LimitsConfig
from smg.core.conn_deadlines import ConnDeadlines, DeadlineLimits, Sample, Verdict
from smg.edge.watched import buffered_bytes

log = structlog.get_logger("smg.edge")


class BodyStalled(Exception):
    """Set on a request's payload by the sweeper: the body brought no byte in time."""


class Guarded(Protocol):
    """What the guard needs of a connection: aiohttp's `EdgeHandler` or the edge's protocol."""

    admitted: bool
    edge_transport: asyncio.Transport | None
    fd: int
    deadlines: ConnDeadlines | None
    cut: Verdict | None

    def sample(self) -> Sample: ...
    def stall_body(self) -> None: ...
    def force_close(self) -> None: ...


class EdgeHandler(RequestHandler):
    """One client connection: aiohttp's protocol plus the counters the sweeper samples."""

    __slots__ = (
        "admitted",
        "body_reader",
        "cut",
        "deadlines",
        "edge_transport",
        "fd",
        "guard",
        "held",
        "in_request",
        "requests",
        "rx",
        "rx_at_idle",
        "writer",
    )

    def __init__(self, manager: web.Server, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.admitted = False
        self.edge_transport: asyncio.Transport | None = None
        self.fd = -1  # the socket's descriptor, to ask the kernel what the client has not taken
        self.deadlines: ConnDeadlines | None = None
        self.cut: Verdict | None = None
        self.rx = 0
        self.rx_at_idle = 0
        self.requests = 0
        self.in_request = False
        self.writer: Any = None  # the current (or last) response's StreamWriter
        self.body_reader: Any = None  # the payload while `read_body` reads it
        self.held = 0  # body-budget bytes the current request holds

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.guard.admit(self, transport):
            super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.admitted:
            self.guard.forget(self)
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.rx += len(data)
        super().data_received(data)

    async def _handle_request(self, request: Any, start_time: Any, request_handler: Any) -> Any:
        self.requests += 1
        self.in_request = True
        self.writer = request.writer
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            self.in_request = False
            self.rx_at_idle = self.rx
            self.body_reader = None
            if self.held:
                self.guard.budget.release(self.held)
                self.held = 0

    def sample(self) -> Sample:
        """The counters now. What the client has taken is what was written minus what still
        waits in the transport and in the kernel's send queue (the kernel's send buffer holds
        megabytes: a client that stops reading is seen only once its window is closed)."""
        buffered = buffered_bytes(self.edge_transport, self.fd, self.in_request)
        written = self.writer.output_size if self.writer is not None else 0
        return Sample(
            rx=self.rx,
            requests=self.requests,
            in_request=self.in_request,
            rx_at_idle=self.rx_at_idle,
            reading_body=self.body_reader is not None,
            sent=written - buffered,
            buffered=buffered,
        )

    def stall_body(self) -> None:
        """The body stopped coming: `read_body` wakes with `BodyStalled` (and answers 408); the
        connection closes after that answer, as the rest of the body will never be read."""
        reader = self.body_reader
        if reader is not None:
            reader.set_exception(BodyStalled())
            reader.feed_eof()  # no lingering read of a body that does not come
        self.close()


class ConnectionGuard:
    def __init__(
        self,
        limits: LimitsConfig,
        *,
        max_connections: int,
        budget_timeout_s: float,
        clock: Clock,
    ) -> None:
        self.limits = DeadlineLimits(
            header_timeout_s=limits.header_timeout_secs,
            body_timeout_s=limits.body_timeout_secs,
            write_timeout_s=limits.write_timeout_secs,
        )
        self.max_connections = max_connections  # 0: no cap
        self.budget = BodyBudget(limits.max_buffered_request_bytes, budget_timeout_s, clock)
        self.clock = clock
        lim = self.limits
        deadlines = (lim.header_timeout_s, lim.body_timeout_s, lim.write_timeout_s)
        on = [t for t in (*deadlines, limits.keepalive_timeout_secs) if t > 0]
        self.interval_s = min(1.0, max(0.05, min(on) / 5))  # a deadline is met within 1/5
        self.conns: set[Guarded] = set()
        self.closed: Counter[str] = Counter()  # connections cut, by reason
        self._refusal = _canned(errors.too_many_connections(max_connections))

    # --- the protocol factory ------------------------------------------------------------------
    def factory(self, server: web.Server) -> Any:
        """The listener's protocol factory for `server` (the runner's low-level server)."""
        check_aiohttp(server)
        kwargs = server._kwargs  # what aiohttp's own factory passes (keep-alive, logging, ...)
        loop = server._loop

        def make() -> EdgeHandler:
            return EdgeHandler(server, self, loop=loop, **kwargs)

        return make

    def admit(self, h: Guarded, base: asyncio.BaseTransport) -> bool:
        transport = cast(asyncio.Transport, base)  # uvloop's transports do not subclass asyncio's
        if self.max_connections and len(self.conns) >= self.max_connections:
            self.closed["over_limit"] += 1
            transport.write(self._refusal)
            transport.close()
            return False
        h.admitted = True
        h.edge_transport = transport
        sock = transport.get_extra_info("socket")
        h.fd = sock.fileno() if sock is not None else -1
        h.deadlines = ConnDeadlines(self.limits, self.clock.now())
        self.conns.add(h)
        return True

    def forget(self, h: Guarded) -> None:
        self.conns.discard(h)

    # --- the sweeper ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Sample every connection each interval, until cancelled."""
        while True:
            await self.clock.sleep(self.interval_s)
            try:
                self.sweep(self.clock.now())
            except Exception:  # a bug here must not stop the listener: say so, sweep again
                log.exception("connection_sweep_failed")

    def sweep(self, now: float) -> None:
        for h in list(self.conns):  # a copy: cutting a connection may change the set
            assert h.deadlines is not None
            verdict = h.deadlines.observe(h.sample(), now)
            if verdict is not None:
                self._cut(h, verdict)

    def _cut(self, h: Guarded, verdict: Verdict) -> None:
        tr = h.edge_transport
        if h.cut is not None or verdict is Verdict.WRITE_STALL:
            # cut before and still here (its close waits on bytes nobody reads), or a client
            # that stopped reading: drop it now; its handler is cancelled
            if tr is not None:
                tr.abort()
            if h.cut is None:
                self.closed[verdict.value] += 1
            h.cut = verdict
            return
        h.cut = verdict
        self.closed[verdict.value] += 1
        if verdict is Verdict.BODY_TIMEOUT:
            h.stall_body()
        else:
            h.force_close()

    def collector(self) -> Collector:
        return _GuardCollector(self)


def _canned(err: errors.ApiError) -> bytes:
    body = err.to_json()
    head = (
        f"HTTP/1.1 {err.status} Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-SMG-Error-Code: {err.code}\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def check_aiohttp(server: web.Server) -> None:
    """The guard subclasses aiohttp internals; refuse to run where they are not as expected."""
    ok = (
        inspect.iscoroutinefunction(getattr(RequestHandler, "_handle_request", None))
        and isinstance(getattr(server, "_kwargs", None), dict)
        and getattr(server, "_loop", None) is not None
    )
    if not ok:
        raise RuntimeError(
            f"aiohttp {aiohttp.__version__}: RequestHandler internals differ from 3.10-3.14; "
            "smg's connection guard (smg/api/connection_guard.py) must be updated"
        )


class _GuardCollector(Collector):
    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        g = self.guard
        opened = GaugeMetricFamily("smg_http_connections_open", "Open client connections")
        opened.add_metric([], len(g.conns))
        yield opened
        active = GaugeMetricFamily(
            "smg_http_connections_active", "Open client connections (the Rust gateway's name)"
        )
        active.add_metric([], len(g.conns))
        yield active
        closed = CounterMetricFamily(
            "smg_http_connections_cut",
            "Client connections the gateway closed: header_timeout, body_timeout, write_stall, "
            "over_limit (refused past max_connections)",
            labels=["reason"],
        )
        for reason in ("header_timeout", "body_timeout", "write_stall", "over_limit"):
            closed.add_metric([reason], g.closed[reason])
        yield closed
        core = g.budget.core
        held = GaugeMetricFamily(
            "smg_http_request_body_bytes_held", "Request-body bytes held by requests in flight"
        )
        held.add_metric([], core.held)
        yield held
        waiting = GaugeMetricFamily(
            "smg_http_request_body_waiting", "Requests waiting for room to buffer their body"
        )
        waiting.add_metric([], core.waiting)
        yield waiting
