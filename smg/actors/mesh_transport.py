"""The mesh's sockets: UDP for probes and gossip, TCP streams for push-pull and state sync.

A thin asyncio shell around the codec: it encodes what the node asks to send, decodes what
arrives, and hands decoded messages to two callbacks. Everything received is size-limited and,
with a keyring, decrypted and authenticated; a packet or frame that fails is counted by reason
and dropped, never raised. Without a keyring (a loopback mesh) nothing from beyond loopback is
read at all, unless the operator said `--mesh-insecure` (`allow_remote`).

Both channels share one port number (as memberlist does). A TCP connection opens with a hello:
an empty `PushPull` naming the sender's mesh address, so the receiver knows whom the stream is
from (TCP source ports are ephemeral). `FaultPlan` injects loss, delay and partitions in-process
for chaos tests (tc netem is not available here).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from smg.mesh.codec import CodecError, FrameDecoder, decode_packet, encode_frame, encode_packet
from smg.mesh.config import is_loopback
from smg.mesh.keyring import Keyring
from smg.mesh.messages import Message, PushPull, StreamMessage

log = structlog.get_logger("smg.actors.mesh_transport")

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]

MAX_PACKET_BYTES = 65_507
MAX_QUEUED_STREAM_BYTES = 16 * 1024 * 1024
STREAM_IDLE_S = 60.0


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


EPHEMERAL_BIND_TRIES = 8  # --mesh-port 0: UDP picks, TCP must get the same number


@dataclass(slots=True)
class FaultPlan:
    """In-process fault injection: applied to everything this node sends and receives."""

    drop: float = 0.0  # probability of losing each UDP packet (each way)
    delay_s: tuple[float, float] = (0.0, 0.0)  # extra latency on sends (reorders UDP)
    blocked: set[str] = field(default_factory=set)  # peers cut off completely (both channels)

    def cuts(self, addr: str) -> bool:
        return addr in self.blocked


@dataclass(slots=True)
class TransportStats:
    bytes_in: Counter[str] = field(default_factory=Counter)  # by channel: udp / tcp
    bytes_out: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)  # by reason


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, owner: MeshTransport) -> None:
        self.owner = owner

    def datagram_received(
        self, data: bytes, addr: tuple[str, int] | tuple[str, int, int, int]
    ) -> None:
        if not self.owner.allow_remote and not is_loopback(addr[0]):
            self.owner.stats.dropped["not_loopback"] += 1
            return
        self.owner._on_datagram(data, f"{addr[0]}:{addr[1]}")

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable and the like
        self.owner.stats.dropped["udp_error"] += 1


class _Outbound:
    """One peer's outgoing TCP stream: a bounded byte queue drained by one task."""

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()
        self.queued = 0
        self.wake = asyncio.Event()


class MeshTransport:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        advertise_addr: str,
        node_id: str,
        keyring: Keyring | None,
        on_packet: Callable[[str, Message], None],
        on_stream: Callable[[str, StreamMessage], None],
        rng: random.Random,
        faults: FaultPlan | None = None,
        allow_remote: bool | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.advertise_addr = advertise_addr
        self.node_id = node_id
        self.keyring = keyring
        # peers beyond loopback are read only when authenticated (or explicitly allowed)
        self.allow_remote = keyring is not None if allow_remote is None else allow_remote
        self.on_packet = on_packet
        self.on_stream = on_stream
        self.rng = rng
        self.faults = faults or FaultPlan()
        self.stats = TransportStats()
        self._udp: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._spawn: Spawn | None = None
        self._out: dict[str, _Outbound] = {}
        self._inbound: set[asyncio.Task[Any]] = set()
        self._closing = False

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self, spawn: Spawn) -> None:
        """Bind both sockets; background tasks are started with `spawn` (the owner's group)."""
        self._spawn = spawn
        if self.port != 0:
            await self._bind(self.port)
            return
        # port 0: the kernel picks the UDP port, and TCP needs the same number, which another
        # socket may already hold (an outgoing connection's ephemeral port): pick again
        for attempt in range(EPHEMERAL_BIND_TRIES):
            try:
                await self._bind(0)
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or attempt == EPHEMERAL_BIND_TRIES - 1:
                    raise

    async def _bind(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        udp, _ = await loop.create_datagram_endpoint(
            lambda: _UdpProtocol(self), local_addr=(self.host, port)
        )
        port = port or udp.get_extra_info("sockname")[1]
        try:
            self._server = await asyncio.start_server(
                self._serve_stream, self.host, port, reuse_address=True, limit=1 << 16
            )
        except OSError:
            udp.close()
            raise
        self._udp, self.port = udp, port

    async def close(self) -> None:
        self._closing = True
        if self._udp is not None:
            self._udp.close()
        if self._server is not None:
            self._server.close()
            # asyncio's server starts one task per inbound stream; they are ours to end
            for task in list(self._inbound):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        for out in self._out.values():
            out.wake.set()

    # --- UDP ------------------------------------------------------------------------------------
    def send(self, addr: str, msg: Message) -> None:
        if self._udp is None or self._closing or self.faults.cuts(addr):
            return
        if self.faults.drop and self.rng.random() < self.faults.drop:
            self.stats.dropped["injected"] += 1
            return
        try:
            data = encode_packet(msg, self.keyring)
        except ValueError:  # a message our own core should never build: count it, don't crash
            self.stats.dropped["encode_error"] += 1
            log.warning("mesh_encode_error", message=repr(msg)[:200])
            return
        lo, hi = self.faults.delay_s
        if hi > 0:
            asyncio.get_running_loop().call_later(
                self.rng.uniform(lo, hi), self._sendto, data, addr
            )
        else:
            self._sendto(data, addr)

    def _sendto(self, data: bytes, addr: str) -> None:
        if self._udp is None or self._udp.is_closing():
            return
        try:
            self._udp.sendto(data, split_addr(addr))
        except (OSError, ValueError, OverflowError):
            self.stats.dropped["udp_send_error"] += 1
            return
        self.stats.bytes_out["udp"] += len(data)

    def _on_datagram(self, data: bytes, src: str) -> None:
        self.stats.bytes_in["udp"] += len(data)
        if self.faults.cuts(src) or (self.faults.drop and self.rng.random() < self.faults.drop):
            self.stats.dropped["injected"] += 1
            return
        try:
            msg = decode_packet(data, self.keyring, MAX_PACKET_BYTES)
        except CodecError as exc:
            self.stats.dropped[exc.reason] += 1
            return
        self.on_packet(src, msg)

    # --- TCP ------------------------------------------------------------------------------------
    def stream(self, addr: str, msg: StreamMessage) -> None:
        """Queue one message for `addr`'s stream; the connection is opened on demand."""
        if self._closing or self._spawn is None or self.faults.cuts(addr):
            return
        try:
            frame = encode_frame(msg, self.keyring)
        except ValueError:
            self.stats.dropped["encode_error"] += 1
            log.warning("mesh_encode_error", message=repr(msg)[:200])
            return
        out = self._out.get(addr)
        if out is None:
            out = self._out[addr] = _Outbound()
            self._spawn(self._pump(addr, out), f"mesh-out:{addr}")
        while out.frames and out.queued + len(frame) > MAX_QUEUED_STREAM_BYTES:
            out.queued -= len(out.frames.popleft())  # state sync repairs what is dropped
            self.stats.dropped["stream_queue_full"] += 1
        out.frames.append(frame)
        out.queued += len(frame)
        out.wake.set()

    async def _pump(self, addr: str, out: _Outbound) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            while not self._closing:
                if not out.frames:
                    out.wake.clear()
                    try:
                        await asyncio.wait_for(out.wake.wait(), STREAM_IDLE_S)
                    except TimeoutError:
                        break  # idle: close; a later send reconnects
                    continue
                if self.faults.cuts(addr):
                    out.frames.clear()
                    out.queued = 0
                    continue
                if writer is None:
                    writer = await self._connect(addr)
                    if writer is None:  # unreachable: drop what is queued (repaired later)
                        self.stats.dropped["stream_connect"] += len(out.frames)
                        out.frames.clear()
                        out.queued = 0
                        continue
                lo, hi = self.faults.delay_s
                if hi > 0:
                    await asyncio.sleep(self.rng.uniform(lo, hi))
                batch = b"".join(out.frames)
                out.frames.clear()
                out.queued = 0
                try:
                    writer.write(batch)
                    await writer.drain()
                except (OSError, ConnectionError):
                    self.stats.dropped["stream_write"] += 1
                    writer = None
                    continue
                self.stats.bytes_out["tcp"] += len(batch)
        finally:
            if self._out.get(addr) is out:
                del self._out[addr]
            if writer is not None:
                writer.close()

    async def _connect(self, addr: str) -> asyncio.StreamWriter | None:
        try:
            host, port = split_addr(addr)  # a gossiped address need not parse: never raise
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
        except (OSError, TimeoutError, ValueError, OverflowError):
            return None
        hello = encode_frame(PushPull(self.node_id, self.advertise_addr, (), False), self.keyring)
        writer.write(hello)
        self.stats.bytes_out["tcp"] += len(hello)
        return writer

    async def _serve_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        decoder = FrameDecoder(self.keyring)
        peer: str | None = None
        task = asyncio.current_task()
        if task is not None:
            self._inbound.add(task)
        try:
            source = writer.get_extra_info("peername")
            if not self.allow_remote and not (source and is_loopback(source[0])):
                self.stats.dropped["not_loopback"] += 1
                return
            while not self._closing:
                try:
                    data = await asyncio.wait_for(reader.read(1 << 16), STREAM_IDLE_S * 2)
                except TimeoutError:
                    break
                if not data:
                    break
                self.stats.bytes_in["tcp"] += len(data)
                try:
                    messages = decoder.feed(data)
                except CodecError as exc:
                    self.stats.dropped[exc.reason] += 1
                    break  # a stream that lied once is not trusted again
                for msg in messages:
                    if peer is None:
                        if not isinstance(msg, PushPull):
                            self.stats.dropped["no_hello"] += 1
                            return
                        peer = msg.addr
                        if not msg.updates:
                            continue  # the bare hello
                    if self.faults.cuts(peer):
                        self.stats.dropped["injected"] += 1
                        continue
                    self.on_stream(peer, msg)
        except (OSError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # `close` ended it: end normally, as Python 3.11's stream server logs a traceback
            # for a handler task that ends cancelled (its callback calls `task.exception()`)
            if not self._closing:
                raise
        finally:
            writer.close()
            if task is not None:
                self._inbound.discard(task)
