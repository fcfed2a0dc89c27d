"""The pool as a scope (no server needed): the body's exception goes on unwrapped (not an
ExceptionGroup), a closed pool opens nothing, a bad request-level URL is refused before the
pool is asked for anything."""

from __future__ import annotations

import pytest

from smg.clock import FakeClock
from smg.config.mcp import McpConfig, McpServerConfig
from smg.mcp_client.pool import InvalidServerUrl, McpPool, McpUnavailable


async def test_the_body_exception_is_not_wrapped() -> None:
    cfg = McpConfig((McpServerConfig("s", "stdio", command="/nonexistent/mcp"),))
    with pytest.raises(KeyError):
        async with McpPool(cfg, clock=FakeClock()):
            raise KeyError("body")


async def test_a_closed_pool_opens_nothing() -> None:
    cfg = McpConfig((McpServerConfig("s", "stdio", command="/nonexistent/mcp"),))
    pool = McpPool(cfg, clock=FakeClock())
    async with pool:
        pass
    with pytest.raises(McpUnavailable, match="'s': closed"):
        await pool.server("s").list_tools()
    with pytest.raises(McpUnavailable, match="'r': the pool is closed"):
        async with pool.request_server("r", "http://127.0.0.1:1/mcp", {}):
            pass
    with pytest.raises(InvalidServerUrl):
        async with pool.request_server("r", "gopher://h", {}):
            pass
