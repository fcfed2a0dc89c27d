"""Attackers on the gateway's own listener, with raw sockets: slowloris headers, clients that stop
reading a stream, stalled and oversized bodies. Each keeps its sockets so a test can ask whether
the gateway closed them."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psutil
from integration.conftest import Gateway

CHAT_PATH = "/v1/chat/completions"


def connect(port: int, *, rcvbuf: int | None = None, timeout_s: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connect, so the advertised window stays small
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout_s)
    s.connect(("127.0.0.1", port))
    return s


def is_closed(s: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection; pending bytes are read and dropped."""
    s.setblocking(False)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def request_head(
    path: str, *, length: int | None = None, chunked: bool = False, extra: str = ""
) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    return (head + extra + "\r\n").encode()


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def read_response(s: socket.socket, timeout_s: float = 10.0) -> RawResponse:
    """One HTTP/1.1 response with a Content-Length body (what the gateway's errors carry)."""
    s.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a whole response head: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return RawResponse(status, headers, rest[:length])


@dataclass
class Slowloris:
    """`n` connections that each send a request line and a header, then a header byte now and
    then, never finishing the headers."""

    port: int
    n: int
    every_s: float = 2.0
    socks: list[socket.socket] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Slowloris:
        for _ in range(self.n):
            s = connect(self.port)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: ")
            self.socks.append(s)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()
        return self

    def _trickle(self) -> None:
        while not self._done.wait(self.every_s):
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.send(b"a")

    def open_count(self) -> int:
        return sum(not is_closed(s) for s in self.socks)

    def close(self) -> None:
        self._done.set()
        for s in self.socks:
            s.close()


def stream_body(max_tokens: int, model: str = "m") -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "keep streaming"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()


@dataclass
class NonReaders:
    """`n` clients that each open a stream and never read a byte of it (a tiny receive window,
    so the gateway's send buffers fill soon)."""

    port: int
    n: int
    max_tokens: int = 30000
    model: str = "m"
    socks: list[socket.socket] = field(default_factory=list)

    def start(self) -> NonReaders:
        body = stream_body(self.max_tokens, self.model)
        for _ in range(self.n):
            s = connect(self.port, rcvbuf=4096)
            s.sendall(request_head(CHAT_PATH, length=len(body)) + body)
            self.socks.append(s)
        return self

    def closed_count(self) -> int:
        """How many the gateway dropped (a reset, or the end of the bytes it had sent)."""
        return sum(is_closed(s) for s in self.socks)

    def close(self) -> None:
        for s in self.socks:
            s.close()


class BigBody(threading.Thread):
    """Sends one `mb`-MB chat body (chunked unless `content_length`), paced at `mb_per_s`, while
    reading the answer: `status` (0 if the gateway cut the connection first), and how many body
    bytes were sent when the answer came (`sent_at_answer`)."""

    def __init__(
        self, port: int, mb: float, *, content_length: bool = False, mb_per_s: float = 25.0
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.total = port, int(mb * 2**20)
        self.content_length, self.mb_per_s = content_length, mb_per_s
        self.status = 0
        self.response: RawResponse | None = None
        self.sent = 0
        self.sent_at_answer: int | None = None
        self.error: str | None = None
        self._answered = threading.Event()

    def run(self) -> None:
        s = connect(self.port, timeout_s=60)
        reader = threading.Thread(target=self._read, args=(s,), daemon=True)
        try:
            length = self.total if self.content_length else None
            s.sendall(request_head(CHAT_PATH, length=length, chunked=not self.content_length))
            reader.start()
            self._send_body(s)
        except OSError as exc:  # the gateway answered and closed while we were sending
            self.error = repr(exc)
        reader.join(60)
        s.close()

    def _send_body(self, s: socket.socket) -> None:
        head = b'{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"'
        tail = b'"}]}'
        piece = b"x" * 2**18
        started = time.monotonic()
        self._send(s, head)
        left = self.total - len(head) - len(tail)
        while left > 0 and not self._answered.is_set():
            n = min(left, len(piece))
            self._send(s, piece[:n])
            left -= n
            ahead = self.sent / (self.mb_per_s * 2**20) - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if not self._answered.is_set():
            self._send(s, tail)
            if not self.content_length:
                s.sendall(b"0\r\n\r\n")

    def _read(self, s: socket.socket) -> None:
        try:
            self.response = read_response(s, timeout_s=60)
            self.sent_at_answer = self.sent
            self.status = self.response.status
        except OSError as exc:
            self.error = (self.error or "") + f" / read: {exc!r}"
        finally:
            self._answered.set()

    def _send(self, s: socket.socket, data: bytes) -> None:
        if self.content_length:
            s.sendall(data)
        else:
            s.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        self.sent += len(data)


def rss_mb(gw: Gateway) -> float:
    return psutil.Process(gw.proc.popen.pid).memory_info().rss / 2**20


class RssWatch(threading.Thread):
    """The gateway's peak RSS, sampled every 50 ms while the block runs."""

    def __init__(self, gw: Gateway) -> None:
        super().__init__(daemon=True)
        self.gw = gw
        self.peak_mb = 0.0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.peak_mb = max(self.peak_mb, rss_mb(self.gw))

    @contextlib.contextmanager
    def watching(self) -> Iterator[RssWatch]:
        self.start()
        try:
            yield self
        finally:
            self._done.set()
            self.join()
