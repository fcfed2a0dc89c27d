"""The asyncio shell around the sans-IO HTTP/1.1 connection: one Protocol per client socket
(smg/edge/server.py owns the listener and the set of connections).

Per connection: one request is answered at a time, in order; its handler runs as a task the
connection owns (cancelled when the client goes). Reading pauses while the core holds
`max_pipeline` parsed requests or `body_high_water` unread body bytes; writes wait for the
transport's `resume_writing` (at most `write_timeout`, then the connection is aborted). Timers:
the header block must arrive within `header_timeout` from the connect, or from the first byte of
a later request (a partial head gets 408, then the close); an idle keep-alive connection closes
after `keep_alive_timeout`; a body that stalls `body_timeout` gets 408. An unexpected exception
from a handler becomes a 500 in OpenAI's error shape and the close; an `ApiError` is answered
with its own status and keeps the connection if the request was read whole. A FIN from the
client ends the connection (a handler in flight is cancelled).

Hand-over (smg/edge/handoff.py): given `native` and `handoff`, the bytes that start a request on
an idle connection (no request queued or partly parsed) are held until `native` can judge the
request line; a request that is not native hands the whole connection (transport and the held
bytes) to the protocol `handoff()` makes, and the edge forgets it. Bytes that arrive while the
answer to the previous request is still being written are held the same way and judged once
it is done. A non-native request parsed in the same read as an earlier one (pipelined behind
it) cannot be handed over: it is answered 400 `pipelined_handoff` after the earlier answers,
and the connection closes.

Watcher (smg/edge/watched.py): given one, it admits each connection (or refuses it) and is told
when it leaves (closed or handed over); the server's own `max_connections` is then not applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from smg import errors
from smg.edge.exchange import JSON, EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.h1 import Body, End, H1Connection, Head, Limits, ProtocolError, RequestHead
from smg.edge.h1_write import NO_REQUEST, ResponseWriter, error_bytes
from smg.edge.handing import HandingOver, Handoff
from smg.edge.handoff import Native, pipelined_handoff
from smg.edge.watched import WatchedConnection, Watcher
from smg.errors import ApiError

log = logging.getLogger(__name__)

Handler = Callable[[EdgeRequest, EdgeResponse], Awaitable[Reply | None]]


_HEADER, _IDLE = 1, 2
LINGER = 2.0  # seconds a closing connection drops late input before it closes


class H1Protocol(WatchedConnection, HandingOver, asyncio.Protocol):
    """One client connection; see the module doc."""

    transport: asyncio.Transport

    def __init__(
        self,
        handler: Handler,
        limits: Limits,
        timeouts: Timeouts,
        registry: set[H1Protocol],
        *,
        native: Native | None = None,
        handoff: Handoff | None = None,
        watcher: Watcher | None = None,
    ) -> None:
        self._init_watched()
        self.watcher = watcher
        self.registry = registry  # the server's open connections
        self._init_handing(native, handoff, limits)
        self.handler = handler
        self.timeouts = timeouts
        self.loop = asyncio.get_running_loop()
        self.core = H1Connection(limits)
        self.response = ResponseWriter(NO_REQUEST)
        self.current: EdgeRequest | None = None
        self.task: asyncio.Task[None] | None = None
        self.closing = False  # no further request will be served
        self.body_done = True  # the current request's End was taken
        self.peer: object = None
        self._read_paused = False
        self.write_paused = False  # the client's transport is full (an attribute: read a chunk)
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._body_waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_kind = 0
        self._deadline = 0.0
        self._lingering = False
        self._linger: asyncio.TimerHandle | None = None

    # -- transport callbacks -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.watcher is not None and not self.watcher.admit(self, transport):
            self.handed = True  # refused (the watcher closed it): not ours
            return
        self.peer = transport.get_extra_info("peername")
        self.registry.add(self)
        self._set_timer(_HEADER, self.timeouts.header)

    def shutdown(self) -> None:
        """The server is stopping: close now if idle, else after the answer in flight."""
        self.closing = True
        if self.current is None:
            self._close()
        elif not self.response.started:
            self.response.keep_alive = False

    def data_received(self, data: bytes) -> None:
        if self._lingering or self.handed:
            return  # closing: late input is dropped
        self.rx += len(data)
        idle = self._timer_kind == _IDLE
        self._take(data)
        # The first bytes of a new request: the head's deadline runs from now, unless the head
        # is already whole (the usual case: its request has started, and no timer call was
        # made: uvloop's call_at costs microseconds; the idle timer just fires early, unarmed).
        if idle and self._timer_kind == _IDLE and not (self._lingering or self.handed):
            self._set_timer(_HEADER, self.timeouts.header)

    def _take(self, data: bytes) -> None:
        if self.prefix is not None:  # a hand-over is possible: route at request boundaries
            routed = self._route(data)
            if routed is None:
                return
            data = routed
        core = self.core
        core.feed(data)
        if self.current is None:
            self._next()
        elif (w := self._body_waiter) is not None and not w.done():
            w.set_result(None)
        if not (
            core.want_read or self._read_paused or self._lingering or self.transport.is_closing()
        ):
            self._read_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        # A FIN reads as the client gone (as Go's server and aiohttp take it): a handler in
        # flight is cancelled by connection_lost; nothing is answered to a half-closed socket.
        self.core.feed_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        task = self.task
        if task is not None and self.response.finished:
            # the answer went out whole: the handler finishes what it still does (e.g. settle a
            # PD prefill leg: the gateway's work, under its own deadlines), and the connection
            # stays counted until it has, so the server's close waits for it (within its grace)
            task.add_done_callback(self._forget)
        else:
            self.registry.discard(self)
            if task is not None:
                task.cancel()  # the client is gone mid-answer: so is its handler
        if self.watcher is not None:
            self.watcher.forget(self)
        self.closing = True
        self._timer_kind = 0
        for handle in (self._timer, self._linger):
            if handle is not None:
                handle.cancel()
        self._timer = self._linger = None
        for fut in self._drain_waiters:
            if not fut.done():
                fut.set_exception(ConnectionResetError("the client closed the connection"))
        self._drain_waiters.clear()

    def _forget(self, _task: object) -> None:
        self.registry.discard(self)

    def abandon(self) -> None:
        """The server's grace is over: drop the connection and cancel its handler, including one
        that outlived its client after a whole answer."""
        self.transport.abort()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        for fut in self._drain_waiters:
            if not fut.done():
                fut.set_result(None)
        self._drain_waiters.clear()

    # -- requests ---------------------------------------------------------------------------

    def _next(self) -> None:
        """Start the next queued request, answer a protocol error, or wait (timers armed)."""
        core = self.core
        while (ev := core.next_event()) is not None:
            t = type(ev)
            if t is Head:
                self._start(ev.head)  # type: ignore[union-attr]
                break
            if t is ProtocolError:
                self._close_with(ApiError(ev.status, ev.code, ev.message))  # type: ignore[union-attr]
                return
            # Body/End of a request answered without reading them: dropped
        else:
            if core.done:
                self._close()
                return
            if self._timer_kind != _HEADER:  # a head's deadline runs from its first byte
                tm = self.timeouts
                in_head = core.in_head or self._holding()
                self._set_timer(*((_HEADER, tm.header) if in_head else (_IDLE, tm.keep_alive)))
        self.resume_if_room()

    def _start(self, head: RequestHead) -> None:
        self._timer_kind = 0
        self.written += self.response.output
        if self.native is not None and self._not_native(head):
            self.response = ResponseWriter(head, closing=True)
            self.closing = True
            err = pipelined_handoff()
            self.transport.write(self.response.whole(err.status, JSON, err.to_json()))
            self._close()
            return
        last = self.core.done and not any(type(e) is Head for e in self.core.events)
        self.response = ResponseWriter(head, closing=self.closing or last)
        self.body_done = False
        req = self.current = EdgeRequest(self, head, self.peer)
        self.requests += 1
        self.in_request = True
        self.task = self.loop.create_task(self._run(req))

    async def _run(self, req: EdgeRequest) -> None:
        resp = EdgeResponse(self)
        try:
            reply = await self.handler(req, resp)
            if reply is not None:  # EdgeResponse.send without its coroutine
                self.before_head()
                self.transport.write(self.response.whole(reply.status, reply.headers, reply.body))
                if self.write_paused:
                    await self.drain()
            elif not self.response.started:
                raise RuntimeError("the handler returned no response")
            elif not self.response.finished:
                await resp.end()
        except ApiError as err:
            self._fail(err, close=False)
        except (TimeoutError, ConnectionError):
            self.transport.abort()
        except Exception:
            log.exception("edge handler failed: %s %s", req.head.method, req.head.path)
            self._fail(errors.internal("the request handler failed"))
        self._finish()

    def _fail(self, err: ApiError, *, close: bool = True) -> None:
        """Answer `err` in OpenAI's shape (an unexpected error closes the connection; an
        ApiError keeps it if the request was read whole and the stream is still in step)."""
        if self.response.started:
            self.closing = True
            self.transport.abort()  # mid-body: only a cut can tell the client
            return
        self.before_head()
        if close or self.closing:
            self.closing = True
            self.response.keep_alive = False
        self.transport.write(self.response.whole(err.status, JSON, err.to_json()))

    def _finish(self) -> None:
        self.task = None
        self.current = None
        self.in_request = False
        self.rx_at_idle = self.rx
        if self._lingering or self.transport.is_closing():
            return
        if not self.response.keep_alive or self.closing:
            self._close()
            return
        if self.early:
            early, self.early = self.early, b""
            self._take(early)
            return
        self._next()

    def before_head(self) -> None:
        """Called as a response starts: keep-alive only if the request's body is all here."""
        if self.body_done:
            return
        for ev in self.core.events:
            if type(ev) is End:
                return
            if type(ev) is not Body:
                break
        self.closing = True
        self.response.keep_alive = False

    def _close_with(self, err: ApiError) -> None:
        self.closing = True
        self.transport.write(error_bytes(err))
        self._close()

    def _close(self) -> None:
        """Close after the answer. A close with unread input turns into a reset that can drop
        the answer before the client reads it (a 413 mid-upload), so where the transport can
        half-close, send the FIN and drop what still comes for up to `LINGER` s (nginx's
        lingering close); the client's own close ends it sooner."""
        if self._lingering:
            return
        self._lingering = self.closing = True
        self._timer_kind = 0
        transport = self.transport
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.core.done = True
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()
        self._linger = self.loop.call_later(LINGER, transport.close)

    # -- flow control -----------------------------------------------------------------------

    def resume_if_room(self) -> None:
        if self._read_paused and self.core.want_read and not self.transport.is_closing():
            self._read_paused = False
            self.transport.resume_reading()

    async def wait_body(self) -> None:
        fut = self._body_waiter = self.loop.create_future()
        self.resume_if_room()
        try:
            await asyncio.wait_for(fut, self.timeouts.body)
        except TimeoutError:
            raise errors.body_timeout(self.timeouts.body) from None
        finally:
            self._body_waiter = None

    async def drain(self) -> None:
        if not self.write_paused:
            return
        if self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        fut = self.loop.create_future()
        self._drain_waiters.append(fut)
        try:
            await asyncio.wait_for(fut, self.timeouts.write)
        except TimeoutError:
            self.transport.abort()  # the client stopped reading
            raise

    # -- timers (one handle; moved by updating the deadline, re-armed only when it fires) -----

    def _await_head(self) -> None:
        if self._timer_kind != _HEADER:  # held after an answer: the head's deadline from now
            self._set_timer(_HEADER, self.timeouts.header)

    def _stop_timers(self) -> None:
        self._timer_kind = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _set_timer(self, kind: int, seconds: float) -> None:
        self._timer_kind = kind
        deadline = self._deadline = self.loop.time() + seconds
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._expired)

    def _expired(self) -> None:
        self._timer = None
        kind = self._timer_kind
        if kind == 0 or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._expired)
            return
        if kind == _HEADER and (self.core.in_head or self._holding()):
            secs = self.timeouts.header
            msg = f"The request head did not arrive within {secs:g} s"
            self._close_with(ApiError(408, "request_header_timeout", msg))
        else:
            self._close()
