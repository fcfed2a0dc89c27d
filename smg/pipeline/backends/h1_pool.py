"""The lean HTTP/1.1 client's asyncio shell: one `asyncio.Protocol` per connection around the
sans-IO `h1_client.ResponseParser`, and a pool of idle keep-alive connections per worker
(scheme, host, port). The data path's POSTs to HTTP workers go through it (`HttpBackend._post`);
the control plane stays on aiohttp.

- Connects go through `AddressGuard.open_socket` (the worker address policy, after DNS), TLS
  with the workers' context for https:// workers; the connect is bounded by the connect timeout
  (`aiohttp.ConnectionTimeoutError`), the whole exchange by the request's deadline (one timer per
  request: `TimeoutError` before the head, the body's next read fails after it).
- A connection is reused only when its previous answer was read to its end and was keep-alive
  (and nothing followed it); at most `max_idle` idle per worker, closed after `keepalive_s`
  idle; one the worker closes while idle is dropped. A request that fails on a REUSED
  connection before any byte of its answer arrived (the worker closed it as we sent: the
  keep-alive race) is sent once more on a fresh connection.
- Failures are aiohttp's types, as the flow catches them: `ServerDisconnectedError` (closed
  before an answer), `ClientConnectionError` (a malformed head), `ClientPayloadError` (the body
  broke off or was malformed).
- One request per connection at a time (no pipelining); HTTP/1.0 answers work (they close the
  connection); no `Expect: 100-continue`, no proxies from the environment.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import aiohttp

from smg.clock import RunningLoop
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.h1_body import Body, H1Response, headers_of
from smg.pipeline.backends.h1_client import (
    End,
    ParseError,
    ResponseHead,
    ResponseParser,
    host_header,
)

Key = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Target:
    """A worker's base URL, parsed once: where to connect and what the request line says."""

    key: Key  # (scheme, host, port)
    host: str  # the Host header
    prefix: str  # the URL's path before the request's own ("" for most workers)


def target_of(url: str) -> Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname
    return Target((scheme, host, port), host_header(host, port, scheme), parts.path.rstrip("/"))


class _Stale(Exception):
    """A reused connection closed before any byte of the answer: safe to send again."""


class _Conn(asyncio.Protocol):
    def __init__(self, client: H1Client, key: Key) -> None:
        self.client = client
        self.key = key
        self.core = ResponseParser()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self.head: asyncio.Future[H1Response] | None = None
        self.body: Body | None = None
        # One timer per connection, not per request (uvloop's call_at costs microseconds): armed
        # at the first exchange's deadline and re-armed only when it fires before the running
        # exchange's `deadline` (None: no exchange running, the timer does nothing).
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        # made in the loop's create_connection; kept: get_running_loop() costs a getpid() a
        # call on Python 3.11
        self.loop = asyncio.get_running_loop()

    # --- the request -------------------------------------------------------------------------
    def send(self, data: bytes, deadline: float) -> asyncio.Future[H1Response]:
        loop = self.loop
        fut = self.head = loop.create_future()
        if self.closed or self.transport is None:
            fut.set_exception(_Stale())
            return fut
        self.core.expect()
        self.body = None
        self.transport.write(data)
        self.deadline = deadline
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = loop.call_at(deadline, self._expire)
        return fut

    def response_done(self, keep: bool) -> None:
        """The reader is done with the answer: back to the pool when it can carry another."""
        if keep and self.core.reusable and not self.closed:
            self.head = self.body = None  # no cycle through the answer: refcounting frees it
            self.client.put(self)
        else:
            self.close()

    def pause(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.resume_reading()

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.closed:
            self.closed = True
            self.client.forget(self)
            if self.transport is not None:
                self.transport.close()
        self.head = self.body = None  # settled by now: no cycle through the answer

    def _expire(self) -> None:
        self.timer = None
        deadline = self.deadline
        if deadline is None or self.closed:
            return  # no exchange running
        loop = self.loop
        if loop.time() < deadline:  # armed for an earlier exchange: wait for this one's
            self.timer = loop.call_at(deadline, self._expire)
            return
        self.deadline = None
        head, body = self.head, self.body
        if head is not None and not head.done():
            head.set_exception(TimeoutError("no answer from the worker in time"))
        elif body is not None:
            body.set_exception(TimeoutError("the worker's answer did not end in time"))
        self.close()

    # --- asyncio callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        core = self.core
        core.feed(data)
        events = core.events
        body = self.body
        # a piped stream's usual read, one body piece: straight to the sink, as `_dispatch`
        # and `Body.feed` would hand it (two calls fewer a read)
        if (
            len(events) == 1
            and body is not None
            and (sink := body.sink) is not None
            and type(events[0]) is bytes
        ):
            sink.data(events.pop())  # type: ignore[arg-type]
        else:
            self._dispatch()
        if core.done and core.ended and not self.closed:
            self.close()  # bytes nobody asked for: the answer stands, the connection is done

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed, self.closed = self.closed, True
        core = self.core
        started = core.started
        core.feed_eof()
        self._dispatch()
        self.deadline = None
        if self.timer is not None:  # gone: its timer with it
            self.timer.cancel()
            self.timer = None
        head, body = self.head, self.body
        if head is not None and not head.done():
            if not started and self.reused:
                head.set_exception(_Stale())
            else:
                msg = "the worker closed the connection before answering"
                head.set_exception(aiohttp.ServerDisconnectedError(msg))
        elif body is not None and not body.ended:
            body.set_exception(aiohttp.ClientPayloadError("the worker's answer broke off"))
        if not was_closed:
            self.client.forget(self)

    def _dispatch(self) -> None:
        events = self.core.events
        while events:
            ev = events.popleft()
            if type(ev) is bytes:
                body = self.body
                if body is not None:  # a read's body pieces in one feed (one relay write)
                    if events and type(events[0]) is bytes:
                        if type(events[-1]) is bytes:  # all body (a head is first, an end last)
                            ev = b"".join((ev, *events))  # type: ignore[arg-type]
                            events.clear()
                        else:
                            parts = [ev]
                            while type(events[0]) is bytes:  # up to the end that is last
                                parts.append(events.popleft())  # type: ignore[arg-type]
                            ev = b"".join(parts)
                    if (sink := body.sink) is not None:  # piped: as `Body.feed` hands it
                        if events and type(events[0]) is End:  # with the end: one write
                            sink.last(ev)
                        else:
                            sink.data(ev)
                    else:
                        body.feed(ev)
            elif type(ev) is ResponseHead:
                head = self.head
                if head is None or head.done():  # nobody waits (timed out): drop it
                    self.close()
                    return
                resp = H1Response(self, ev.status, headers_of(ev.headers), ev.content_length)
                self.body = resp.content
                head.set_result(resp)
            elif type(ev) is End:
                self._end_timer()
                if self.body is not None:
                    self.body.feed_eof()
                if not ev.keep_alive:  # the whole answer is in: no need to wait for the close
                    self.close()
            elif type(ev) is ParseError:
                head, body = self.head, self.body
                if head is not None and not head.done():
                    head.set_exception(aiohttp.ClientConnectionError(ev.message))
                elif body is not None:
                    body.set_exception(aiohttp.ClientPayloadError(ev.message))
                self.close()
                return

    def _end_timer(self) -> None:
        """The exchange is over: its deadline is off (the timer stays for the next one)."""
        self.deadline = None


class H1Client:
    """The pool of connections to HTTP workers; see the module doc."""

    def __init__(
        self,
        guard: AddressGuard | None = None,
        tls: ssl.SSLContext | None = None,
        *,
        keepalive_s: float = 15.0,
        max_idle: int = 100,
    ) -> None:
        self.guard = guard or AddressGuard()
        self.tls = tls
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self._idle: dict[Key, list[_Conn]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self._loop = RunningLoop()

    async def request(
        self,
        target: Target,
        data: bytes,
        connect_timeout_s: float,
        timeout_s: float,
    ) -> H1Response:
        """Send `data` (one whole request, `h1_client.request_bytes`); return once the answer's
        head is in. The deadline (`timeout_s` from now) bounds the connect, the head and the
        body."""
        loop = self._loop.get()
        deadline = loop.time() + timeout_s
        for fresh in (False, True):
            conn = None if fresh else self._take(target.key, loop.time())
            if conn is None:
                connect_s = min(connect_timeout_s, deadline - loop.time())
                conn = await self._connect(target, max(0.001, connect_s))
            try:
                return await conn.send(data, deadline)
            except _Stale:
                conn.close()
                if fresh:  # cannot happen: a fresh connection is never stale
                    raise aiohttp.ServerDisconnectedError() from None
            except BaseException:  # failed, timed out or cancelled: the worker sees it closed
                conn.close()
                raise
        raise AssertionError("unreachable")

    async def _connect(self, target: Target, timeout_s: float) -> _Conn:
        scheme, host, port = target.key
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            if self.tls is None:  # the system's roots, as aiohttp's default
                self.tls = ssl.create_default_context()
            tls = self.tls
        try:
            async with asyncio.timeout(timeout_s):
                sock = await self.guard.open_socket(host, port)
                try:
                    _, conn = await loop.create_connection(
                        lambda: _Conn(self, target.key),
                        sock=sock,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    )
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise aiohttp.ConnectionTimeoutError(f"no connection in {timeout_s:g} s") from exc
        return conn

    # --- idle connections --------------------------------------------------------------------
    def _take(self, key: Key, now: float) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                conn.reused = True
                return conn
            conn.close()
        return None

    def put(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if self._closed or len(idle) >= self.max_idle:
            conn.close()
            return
        loop = conn.loop
        conn.idle_since = loop.time()
        idle.append(conn)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive_s, self._sweep_idle)

    def forget(self, conn: _Conn) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def _sweep_idle(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.keepalive_s
        left = False
        for idle in self._idle.values():
            for conn in [c for c in idle if c.idle_since <= cutoff]:
                conn.close()
            left = left or bool(idle)
        if left:
            self._sweep = loop.call_later(self.keepalive_s / 2, self._sweep_idle)

    def idle_count(self, key: Key | None = None) -> int:
        if key is not None:
            return len(self._idle.get(key, ()))
        return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        """Close the idle connections; the busy ones close as their answers are settled."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in list(self._idle.values()):
            for conn in list(idle):
                conn.close()
        self._idle.clear()
