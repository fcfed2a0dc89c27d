"""The test MCP server (tests/mcp_client/mcp_servers.py) as a process on a loopback port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SERVER = str(Path(__file__).with_name("mcp_servers.py"))
PATHS = {"streamable-http": "/mcp", "sse": "/sse"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(mode: str) -> Iterator[str]:
    """Start the test server over `mode` (streamable-http, sse); yields its URL once it listens."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, mode, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"the {mode} MCP server exited while starting"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not listen within 30 s"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}{PATHS[mode]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
