"""Attack tools for the mesh suites: a peer that speaks the mesh's wire protocol from the test
process (with a cluster key: an insider; without: an outsider), and a relay that records every
byte between two nodes.

`MeshPeer` owns a TCP listener and a UDP socket on one loopback address (as a node does). It can
send any datagram, open a stream (hello first, as nodes do) and read what nodes stream back to
its address; `documents()` asks a node for the full state of its replicated documents the way a
joining node does (a DocVector with an empty state vector) and returns the raw updates.
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import threading
import time
from collections.abc import Iterable

import msgpack
from pycrdt import Doc, Map

from smg.mesh.codec import KEYED_FLAG, WIRE_VERSION, FrameDecoder, encode_frame, encode_packet
from smg.mesh.doc_wire import decode_update, encode_update
from smg.mesh.identity import NodeIdentity
from smg.mesh.keyring import Keyring
from smg.mesh.messages import DocUpdate, DocVector, Message, PushPull, StreamMessage

NAMESPACES = ("workers", "rate_limits", "cache")


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def bind_pair(host: str) -> tuple[socket.socket, socket.socket]:
    """A TCP listener and a UDP socket on the same free port of `host`."""
    for _ in range(50):
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((host, 0))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind((host, tcp.getsockname()[1]))
        except OSError:
            tcp.close()
            udp.close()
            continue
        tcp.listen(16)
        return tcp, udp
    raise RuntimeError(f"no free port pair on {host}")


class MeshPeer:
    def __init__(self, host: str, keyring: Keyring | None, name: str = "peer@1") -> None:
        self.keyring = keyring
        self.identity = NodeIdentity.generate(name)
        self.node_id = self.identity.node_id
        self.tcp, self.udp = bind_pair(host)
        self.addr = f"{host}:{self.tcp.getsockname()[1]}"
        self.inbox: queue.Queue[tuple[str, StreamMessage]] = queue.Queue()
        self.connections = 0
        self.datagrams: queue.Queue[bytes] = queue.Queue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]
        for t in self._threads:
            t.start()

    # --- sending ---------------------------------------------------------------------------------
    def send(self, to: str, msg: Message | bytes) -> None:
        data = msg if isinstance(msg, bytes) else encode_packet(msg, self.keyring)
        self.udp.sendto(data, _addr(to))

    def send_raw(self, to: str, obj: object) -> None:
        """Any msgpack object as a datagram, sealed as the codec would (the codec itself refuses
        to encode out-of-range values: this is how a hostile or buggy peer sends them)."""
        payload = msgpack.packb(obj, use_bin_type=True)
        if self.keyring is None:
            data = bytes((WIRE_VERSION,)) + payload
        else:
            version = bytes((WIRE_VERSION | KEYED_FLAG,))
            data = version + self.keyring.seal(version + b"p", payload)
        self.udp.sendto(data, _addr(to))

    def stream(self, to: str, *msgs: StreamMessage) -> None:
        """One connection to `to`: our hello, then `msgs`."""
        hello = PushPull(self.node_id, self.addr, (), False)
        data = b"".join(encode_frame(m, self.keyring) for m in (hello, *msgs))
        with socket.create_connection(_addr(to), timeout=5) as conn:
            conn.sendall(data)
            time.sleep(0.2)  # let the node read before we close

    # --- receiving -------------------------------------------------------------------------------
    def _accept(self) -> None:
        self.tcp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(self.keyring)
        sender = "?"
        conn.settimeout(0.2)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(1 << 16)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                try:
                    messages = decoder.feed(data)
                except Exception:
                    return
                for m in messages:
                    if isinstance(m, PushPull) and sender == "?":
                        sender = m.addr
                    self.inbox.put((sender, m))

    def _receive(self) -> None:
        self.udp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data, _ = self.udp.recvfrom(1 << 16)
            except (TimeoutError, OSError):
                continue
            self.datagrams.put(data)

    def updates(self, node: str, namespaces: Iterable[str] = NAMESPACES) -> dict[str, bytes]:
        """The full state of `node`'s documents (namespace -> its update envelope), as a node
        that just joined would ask for it."""
        wanted = set(namespaces)
        empty_sv = encode_update(0, b"\x00")
        self.stream(node, *(DocVector(ns, empty_sv, False) for ns in wanted))
        out: dict[str, bytes] = {}
        deadline = time.monotonic() + 10
        while wanted - out.keys():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no state for {sorted(wanted - out.keys())} from {node}")
            try:
                _, m = self.inbox.get(timeout=remaining)
            except queue.Empty:
                continue
            if isinstance(m, DocUpdate) and m.namespace in wanted:
                out[m.namespace] = m.update
        return out

    def documents(self, node: str) -> dict[str, dict[str, bytes]]:
        """namespace -> {key: raw value bytes}, read from the node's full state."""
        out: dict[str, dict[str, bytes]] = {}
        for ns, envelope in self.updates(node).items():
            doc = Doc()
            doc.apply_update(decode_update(envelope)[1])
            out[ns] = {k: bytes(v) for k, v in doc.get("m", type=Map).items()}
        return out

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self.tcp.close()
        self.udp.close()


class RecordingRelay:
    """Listens on `listen` (UDP and TCP), forwards to `target`, and keeps every byte that passes
    in either direction: what an on-path observer of the mesh sees."""

    def __init__(self, listen: str, target: str) -> None:
        self.target = _addr(target)
        self.host, self.port = _addr(listen)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((self.host, self.port))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((self.host, self.port))
        self.tcp.listen(16)
        self.captured = {"udp": bytearray(), "tcp": bytearray()}
        self._lock = threading.Lock()
        self._upstream: dict[tuple[str, int], socket.socket] = {}  # UDP client -> its socket
        self._client_of: dict[socket.socket, tuple[str, int]] = {}
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.udp, selectors.EVENT_READ, "udp-in")
        self._sel.register(self.tcp, selectors.EVENT_READ, "accept")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _record(self, channel: str, data: bytes) -> None:
        with self._lock:
            self.captured[channel] += data

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.2):
                with contextlib.suppress(OSError):
                    self._event(key.fileobj, key.data)  # type: ignore[arg-type]

    def _event(self, sock: socket.socket, role: object) -> None:
        if role == "udp-in":  # a client's datagram: forward from its own upstream socket
            data, client = sock.recvfrom(1 << 16)
            self._record("udp", data)
            up = self._upstream.get(client)
            if up is None:
                up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                up.bind((self.host, 0))
                self._upstream[client] = up
                self._client_of[up] = client
                self._sel.register(up, selectors.EVENT_READ, "udp-back")
            up.sendto(data, self.target)
        elif role == "udp-back":  # the target's answer: back to that client
            data, _ = sock.recvfrom(1 << 16)
            self._record("udp", data)
            self.udp.sendto(data, self._client_of[sock])
        elif role == "accept":
            conn, _ = sock.accept()
            up = socket.create_connection(self.target, timeout=5)
            for a, b in ((conn, up), (up, conn)):
                a.setblocking(False)
                self._sel.register(a, selectors.EVENT_READ, b)
        elif isinstance(role, socket.socket):  # a TCP pipe: copy to the other side
            data = sock.recv(1 << 16)
            if not data:
                for s in (sock, role):
                    with contextlib.suppress(KeyError, ValueError):
                        self._sel.unregister(s)
                    s.close()
                return
            self._record("tcp", data)
            role.setblocking(True)
            role.sendall(data)
            role.setblocking(False)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
