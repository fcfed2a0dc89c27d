"""The lean gRPC data path: Generate over our own HTTP/2 connection to the engine.

grpc.aio costs ~100 µs of gateway CPU per streamed message (a completion-queue round trip through
its poller thread for every `read()`); a streamed token is one message. This is a thin asyncio
shell around the sans-IO `h2_client.ClientConnection`: `data_received` feeds the state machine
and appends whole gRPC messages to their call, whose reader wakes once per batch of messages that
arrived together (`read_batch`), or which is piped: handed the messages of each read from this
callback, with no task wake (`LeanCall.pipe`). Flow-control credit goes back to the engine only
for messages handed out, so a caller that stops reading (a stalled HTTP client) holds at most one
stream window (`stream_window_bytes`) in the gateway and blocks the engine's sending, instead of
buffering the whole generation (the connection window is refilled on receipt, so one stalled
call does not block the others on its connection: see `h2_client.ClientConnection`).
Control-plane calls (health, model info, loads, Abort, tokenizer download, KV events) stay on
grpc.aio, where a per-call cost does not matter.

A connection per `LeanChannel` (another one is opened when the server's stream limit is reached
or after GOAWAY), HTTP/2 keepalive like the grpc.aio data channel had (a PING after
`keepalive_time_s` without bytes from the engine; no answer within `keepalive_timeout_s` closes
the connection and fails its calls as UNAVAILABLE), the deadline both sent (`grpc-timeout`) and
enforced here. Failures are `CallError` with the gRPC status code name, as grpc.aio reports them.
With an `ssl_context` (grpcs://) every connection is TLS and must negotiate ALPN `h2`; a failed
handshake or certificate check is UNAVAILABLE, like a refused connection.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import cast

import structlog

from smg.pipeline.backends import hpack
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.grpc_call import LeanCall
from smg.pipeline.backends.grpc_errors import CallError, grpc_timeout, http_refusal, status_of
from smg.pipeline.backends.h2_client import (
    END,
    GOAWAY,
    HEADERS,
    MESSAGES,
    PING_ACK,
    RESET,
    STREAM_ERROR,
    ClientConnection,
    H2ProtocolError,
)
from smg.pipeline.backends.h2_frames import (
    ERROR_CANCEL,
    ERROR_REFUSED_STREAM,
)

log = structlog.get_logger("smg.grpc")
# `grpc-timeout` as hpack.encode writes it, up to its value's length byte (a call adds the rest)
_TIMEOUT_FIELD = hpack.encode((("grpc-timeout", ""),))[:-1]
# the status of a call whose stream the engine reset, by the HTTP/2 error code (else INTERNAL)
_RESET_STATUS = {ERROR_REFUSED_STREAM: "UNAVAILABLE", ERROR_CANCEL: "CANCELLED"}


class _Connection(asyncio.Protocol):
    def __init__(self, channel: LeanChannel) -> None:
        self.channel = channel
        self.loop = asyncio.get_running_loop()  # made by create_connection, on its loop
        self.core = ClientConnection(
            stream_window=channel.stream_window_bytes,
            connection_window=channel.connection_window_bytes,
            max_message_bytes=channel.max_message_bytes,
            max_overdraft_bytes=channel.max_overdraft_bytes,
        )
        self.calls: dict[int, LeanCall] = {}
        # a call took messages (`LeanCall._take`): the core's credit, written by `flush_soon`
        # or at the end of the read that delivered them
        self.credit = self.core.consumed
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.refused = ""  # why the connection was given up before it started (TLS without h2)
        self._heard = False  # bytes arrived since the last keepalive tick
        self._tick: asyncio.TimerHandle | None = None
        self._ping_due: asyncio.TimerHandle | None = None
        self._write_paused = False  # the transport's buffer is full: the engine is not reading
        self._flush_due = False  # a write is scheduled for the end of this loop turn

    @property
    def usable(self) -> bool:
        return not self.closed and self.core.can_open

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if self.channel.ssl_context is not None:  # over TLS the handshake is done by now
            tls = transport.get_extra_info("ssl_object")
            alpn = tls.selected_alpn_protocol() if tls is not None else None
            if alpn != "h2":  # a TLS server that would not speak HTTP/2: not a gRPC server
                self.refused = f"the engine did not select HTTP/2 over TLS (ALPN {alpn or 'none'})"
                self.closed = True
                self.transport.abort()
                return
        self._flush()
        self._arm_keepalive()

    def open_call(self, header_block: bytes, message: bytes, call: LeanCall) -> None:
        sid = self.core.start_call(header_block, message)
        call._conn, call._sid = self, sid
        self.calls[sid] = call
        self.flush_soon()

    def cancel_stream(self, sid: int) -> None:
        if self.calls.pop(sid, None) is not None and not self.closed:
            self.core.cancel(sid)
            self._flush()
            self._retire_if_idle()

    def data_received(self, data: bytes) -> None:
        self._heard = True
        failure: H2ProtocolError | None = None
        try:
            events = self.core.receive(data)
        except H2ProtocolError as exc:
            events, failure = exc.events, exc  # what came before the error is good
        calls = self.calls
        for kind, sid, value in events:  # (a call's messages, most of them: handled here)
            if kind == MESSAGES:
                call = calls.get(sid)
                if call is not None:
                    call._arrived(value)  # type: ignore[arg-type]
            else:
                self._on_event(kind, sid, value)
        if failure is not None:
            self._fail_all("INTERNAL", f"HTTP/2 protocol error from the engine: {failure}")
            self._write_paused = False
            self._flush()  # our GOAWAY, with the error code, if the socket takes it
            if self.transport is not None:
                self.transport.abort()
            return
        self.flush_soon()

    def _on_event(self, kind: int, sid: int, value: object) -> None:  # (not a message)
        calls = self.calls
        if kind == END:
            call = calls.pop(sid, None)
            if call is not None:
                call._end(*status_of(value))  # type: ignore[arg-type]
        elif kind == HEADERS:
            self._on_headers(sid, value)  # type: ignore[arg-type]
        elif kind == RESET:
            call = calls.pop(sid, None)
            if call is not None:
                status = _RESET_STATUS.get(value, "INTERNAL")  # type: ignore[call-overload]
                call._end(status, f"the engine reset the stream (HTTP/2 error {value})")
        elif kind == STREAM_ERROR:
            call = calls.pop(sid, None)
            if call is not None:
                status, why = cast(tuple[str, str], value)
                call._end(status, f"the gateway reset the stream: {why}")
        elif kind == GOAWAY:
            log.info("engine_goaway", target=self.channel.target, detail=value, last_stream=sid)
            for refused in [s for s in calls if s > sid]:  # never processed: retryable
                calls.pop(refused)._end("UNAVAILABLE", f"the engine sent {value}")
        elif kind == PING_ACK and self._ping_due is not None:
            self._ping_due.cancel()
            self._ping_due = None
        self._retire_if_idle()  # (a call may have left, or the engine said GOAWAY)

    def _on_headers(self, sid: int, headers: list[tuple[str, str]]) -> None:
        refused = http_refusal(headers)
        call = self.calls.pop(sid, None) if refused is not None else None
        if call is not None:
            self.core.cancel(sid)
            call._end(*refused)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for handle in (self._tick, self._ping_due):
            if handle is not None:
                handle.cancel()
        self._fail_all("UNAVAILABLE", f"the connection to the engine was lost ({exc or 'closed'})")
        self.channel._forget(self)

    def _fail_all(self, status: str, details: str) -> None:
        self.closed = True
        self.credit = _no_credit  # what the ended calls still hand out is not credited
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call._end(status, details)

    def pause_writing(self) -> None:
        """Hold our frames in the core, where the frames owed to the engine are bounded, instead
        of in the transport's buffer, which is not."""
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flush()

    def flush_soon(self) -> None:
        """Write what the core has at the end of this loop turn: the calls opened, the credits
        given and the acks due in one turn go out in one write (one syscall), not one each. A
        write per call was 6 % of a gRPC request's CPU at 64 concurrent calls (py-spy)."""
        if not self._flush_due and self.core.out:  # (most reads owe the engine nothing)
            self._flush_due = True
            self.loop.call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_due = False
        self._flush()
        self._retire_if_idle()  # (a SETTINGS frame, acked here, may have left no room for a call)

    def _flush(self) -> None:
        if self._write_paused:
            return
        data = self.core.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _retire_if_idle(self) -> None:
        """After GOAWAY (or when the engine's stream limit leaves no room for a call), close once
        the last call on this connection is over. Looked at where that can change: a call's end
        or a GOAWAY (`_on_event`), our reset (`cancel_stream`), the engine's SETTINGS (no event:
        the flush of their ACK), not after every read of the socket."""
        if not self.calls and not self.core.can_open and self.transport is not None:
            self.closed = True
            self.transport.close()

    def close(self) -> None:
        self._fail_all("UNAVAILABLE", "the gateway closed the connection")
        if self.transport is not None and not self.transport.is_closing():
            self.core.close()
            self._flush()
            self.transport.close()

    # --- keepalive -------------------------------------------------------------------------------
    def _arm_keepalive(self) -> None:
        self._tick = self.loop.call_later(self.channel.keepalive_time_s, self._keepalive)

    def _keepalive(self) -> None:
        if self.closed or self.transport is None:
            return
        if not self._heard and self._ping_due is None:
            self.core.ping(os.urandom(8))
            self._flush()
            wait = self.channel.keepalive_timeout_s
            self._ping_due = self.loop.call_later(wait, self._ping_timeout)
        self._heard = False
        self._arm_keepalive()

    def _ping_timeout(self) -> None:
        self._ping_due = None
        if self._heard:
            return  # the engine sent something since: alive
        self._fail_all("UNAVAILABLE", "keepalive ping not answered: the engine is unreachable")
        if self.transport is not None:
            self.transport.abort()


def _no_credit(sid: int, nbytes: int) -> None:
    """A closed connection's credit: none."""


class LeanChannel:
    """Server-streaming calls to one engine (`host:port`) over lean HTTP/2 connections."""

    def __init__(
        self,
        target: str,
        *,
        keepalive_time_s: float = 30.0,
        keepalive_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        max_message_bytes: int = 256 * 1024 * 1024,
        max_overdraft_bytes: int = 32 * 1024 * 1024,
        stream_window_bytes: int = 256 * 1024,
        connection_window_bytes: int = 16 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        address_guard: AddressGuard | None = None,
    ) -> None:
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"not host:port: {target!r}")
        self.host = host.strip("[]")
        self.port = int(port)
        self.target = target
        self.keepalive_time_s = keepalive_time_s  # ping after this long without bytes ...
        self.keepalive_timeout_s = keepalive_timeout_s  # ... and give up this long after
        self.connect_timeout_s = connect_timeout_s
        self.max_message_bytes = max_message_bytes
        # beyond the stream windows, what one connection may buffer to admit messages bigger
        # than a window (and so the largest message: the window plus this): a Generate answer
        # with 32 K tokens and 20 top logprobs each is ~10 MB
        self.max_overdraft_bytes = max_overdraft_bytes
        # what one call may buffer unread (thousands of tokens; a bigger message is still
        # admitted whole) and, per RTT, stream: ~1 GB/s at 0.25 ms, far above a token stream
        self.stream_window_bytes = stream_window_bytes
        self.connection_window_bytes = connection_window_bytes  # throughput only: see above
        # TLS (grpcs://): the context must offer ALPN h2 only; None: plaintext (grpc://)
        self.ssl_context = ssl_context
        self._scheme = "http" if ssl_context is None else "https"
        # every connect goes to an address the worker address policy allows (default policy
        # unless the gateway's own is given), resolved here, so DNS cannot move it elsewhere
        self.address_guard = address_guard or AddressGuard()
        self._conns: list[_Connection] = []
        self._lock = asyncio.Lock()
        self._blocks: dict[str, bytes] = {}
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(
        self,
        path: str,
        message: bytes,
        timeout_s: float | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> LeanCall:
        """Send one request message on `path` (e.g. `/vllm.grpc.engine.VllmEngine/Generate`);
        raises `CallError("UNAVAILABLE")` when the engine cannot be reached."""
        loop = self._loop
        if loop is None:  # a channel serves the loop of its first call (one lookup, not one a call)
            loop = self._loop = asyncio.get_running_loop()
        started = loop.time()
        conn = self._usable() or await self._connect(timeout_s)
        block = self._blocks.get(path)
        if block is None:
            block = self._blocks[path] = hpack.encode(
                (
                    (":method", "POST"),
                    (":scheme", self._scheme),
                    (":path", path),
                    (":authority", self.target),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                    ("user-agent", "smg-lean-grpc"),
                )
            )
        call = LeanCall(loop)
        if metadata:  # e.g. the W3C traceparent of the dispatch span
            block += hpack.encode(metadata)
        if timeout_s is not None:
            left = max(0.001, timeout_s - (loop.time() - started))
            value = grpc_timeout(left).encode()
            block += _TIMEOUT_FIELD + len(value).to_bytes(1, "big") + value
            call._timer = loop.call_later(left, call._deadline)
        conn.open_call(block, message, call)
        return call

    def _usable(self) -> _Connection | None:
        for conn in self._conns:
            if conn.usable:
                return conn
        return None

    async def _connect(self, timeout_s: float | None) -> _Connection:
        async with self._lock:
            conn = self._usable()
            if conn is not None:
                return conn
            if self._closed:
                raise CallError("UNAVAILABLE", "the channel is closed")
            limit = self.connect_timeout_s if timeout_s is None else timeout_s
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(limit):  # the TLS handshake included
                    sock = await self.address_guard.open_socket(self.host, self.port)
                    _, protocol = await loop.create_connection(
                        lambda: _Connection(self),
                        sock=sock,
                        ssl=self.ssl_context,
                        server_hostname=None if self.ssl_context is None else self.host,
                    )
            except TimeoutError:
                raise CallError(
                    "DEADLINE_EXCEEDED" if timeout_s is not None else "UNAVAILABLE",
                    f"no connection to {self.target} in {limit:g} s",
                ) from None
            except OSError as exc:  # ssl.SSLError too: bad certificate, wrong host name, ...
                detail = f"failed to connect to {self.target}: {exc}"
                raise CallError("UNAVAILABLE", detail) from None
            if protocol.refused:
                raise CallError("UNAVAILABLE", f"{self.target}: {protocol.refused}")
            self._conns.append(protocol)
            return protocol

    def _forget(self, conn: _Connection) -> None:
        if conn in self._conns:
            self._conns.remove(conn)

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
