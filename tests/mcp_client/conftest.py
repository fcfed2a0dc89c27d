"""Real MCP SDK servers (tests/mcp_client/mcp_servers.py) as processes on loopback ports: one
over streamable HTTP (`http_url`), one over SSE (`sse_url`), shared by the package's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .spawn import serve


@pytest.fixture(scope="package")
def http_url() -> Iterator[str]:
    with serve("streamable-http") as url:
        yield url


@pytest.fixture(scope="package")
def sse_url() -> Iterator[str]:
    with serve("sse") as url:
        yield url
