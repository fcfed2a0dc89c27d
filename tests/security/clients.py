"""Clients that leave: raw sockets that send a request, wait for the answer to start, then go.

This is what load generators do at the end of a run and what a chat UI's "stop" button does:
the connection is reset (SO_LINGER 0) in the middle of the answer.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def request_bytes(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def leave_midway(
    port: int,
    path: str,
    body: dict[str, Any],
    *,
    wait_for: bytes = b"data:",
    wait_s: float = 0.0,
    headers: dict[str, str] | None = None,
    timeout_s: float = 20.0,
) -> bytes:
    """Send one request; once `wait_for` arrived (or, with `wait_for=b""`, after `wait_s`),
    reset the connection. Returns what was received."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    got = b""
    try:
        sock.sendall(request_bytes(port, path, body, headers or {}))
        if wait_for:
            deadline = time.monotonic() + timeout_s
            while wait_for not in got and time.monotonic() < deadline:
                piece = sock.recv(65536)
                if not piece:
                    break
                got += piece
        else:
            time.sleep(wait_s)
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    return got


def crowd_leaves(
    port: int,
    path: str,
    body: dict[str, Any],
    n: int,
    *,
    wait_for: bytes = b"data:",
    wait_s: float = 0.0,
    headers: dict[str, str] | None = None,
) -> list[bytes]:
    """`n` clients at once, each leaving mid-answer (see `leave_midway`)."""
    with ThreadPoolExecutor(n) as pool:
        futures = [
            pool.submit(
                leave_midway,
                port,
                path,
                body,
                wait_for=wait_for,
                wait_s=wait_s,
                headers=headers,
            )
            for _ in range(n)
        ]
        return [f.result() for f in futures]


class NoEnd(AssertionError):
    """The answer did not end within the deadline (or grew past the byte limit)."""


def bounded_request(
    port: int,
    path: str,
    body: dict[str, Any],
    *,
    deadline_s: float = 30.0,
    max_bytes: int = 64 << 20,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a raw socket that must end within `deadline_s` and `max_bytes` (an
    endless or stalled answer raises `NoEnd` instead of hanging the test): (status, headers,
    body as sent: a chunked body keeps its chunk framing)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=deadline_s)
    deadline = time.monotonic() + deadline_s
    got = b""
    try:
        sock.sendall(request_bytes(port, path, body, {"Connection": "close", **(headers or {})}))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoEnd(f"no end within {deadline_s:g} s ({len(got)} bytes so far)")
            sock.settimeout(left)
            try:
                piece = sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not piece:
                break
            got += piece
            if len(got) > max_bytes:
                raise NoEnd(f"over {max_bytes} bytes and still coming")
            head, sep, rest = got.partition(b"\r\n\r\n")
            if sep:
                lower = head.lower()
                if b"transfer-encoding: chunked" in lower and rest.endswith(b"0\r\n\r\n"):
                    break
                for line in lower.split(b"\r\n"):
                    if line.startswith(b"content-length:") and len(rest) >= int(line[15:]):
                        break
                else:
                    continue
                break
    finally:
        sock.close()
    head, _, rest = got.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    hdrs = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return status, hdrs, rest
