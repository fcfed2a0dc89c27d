"""The test MCP server (tests/mcp_client/mcp_servers.py) as a process on a loopback port."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from support.listening import listening
from support.ports import free_port

SERVER = str(Path(__file__).with_name("mcp_servers.py"))
PATHS = {"streamable-http": "/mcp", "sse": "/sse"}


@contextlib.contextmanager
def serve(mode: str) -> Iterator[str]:
    """Start the test server over `mode` (streamable-http, sse); yields its URL once it listens."""
    port = free_port()
    with listening([sys.executable, SERVER, mode, str(port)], port):
        yield f"http://127.0.0.1:{port}{PATHS[mode]}"
