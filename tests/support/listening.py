"""A server process for a test: started, waited for until its loopback port accepts, stopped."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def listening(argv: Sequence[str], port: int, timeout_s: float = 30.0) -> Iterator[None]:
    """Run `argv` until the block ends; enter once 127.0.0.1:`port` accepts connections (fail if
    the process exits first or `timeout_s` passes)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not listen on {port} (exit {proc.poll()})")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
