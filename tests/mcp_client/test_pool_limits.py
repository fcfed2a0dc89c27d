"""The MCP pool's limits and start check, against the real SDK test servers: `check_required`
(a `required: true` server down stops the start naming it; others only warn), the `pool`
section's `idle_timeout` (an unused session is closed on the injected clock, a held one is not)
and the cap on a tool's output text."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from smg.clock import FakeClock
from smg.config.knobs import ConfigError
from smg.config.mcp import McpConfig, McpPoolConfig, McpServerConfig
from smg.mcp_client.pool import McpPool, McpStartError

from .spawn import SERVER, free_port

pytestmark = pytest.mark.integration


def _down(name: str, *, required: bool) -> McpServerConfig:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    return McpServerConfig(
        name, "streamable", url=url, token="tok-SECRET", required=required,
        connect_timeout_secs=5.0,
    )  # fmt: skip


async def test_a_required_server_down_at_start_is_an_error_naming_it(
    http_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="smg.mcp_client")
    up = McpServerConfig("up", "streamable", url=http_url, required=True)
    spawn_fails = McpServerConfig("optional", "stdio", command="/nonexistent/mcp-server")
    cfg = McpConfig((up, _down("search", required=True), spawn_fails))
    async with McpPool(cfg, clock=FakeClock()) as pool:
        with pytest.raises(McpStartError) as info:
            await pool.check_required()
        text = str(info.value)
        assert isinstance(info.value, ConfigError)  # `smg launch` exits 2 with this one line
        assert text.startswith("required MCP server unreachable at start: MCP server 'search'")
        assert "optional" not in text and "'up'" not in text and "\n" not in text
        assert "SECRET" not in text and "127.0.0.1" not in text
        assert [r.getMessage() for r in caplog.records] == [
            "mcp server unreachable at start (not required): MCP server 'optional': "
            "FileNotFoundError"
        ]
        assert "SECRET" not in caplog.text
        assert pool.open_servers == ("up",)  # the check opened what it could


async def test_optional_servers_down_only_warn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="smg.mcp_client")
    local = McpServerConfig(
        "local", "stdio", command=sys.executable, args=(SERVER, "stdio"), required=True
    )
    async with McpPool(McpConfig((local, _down("later", required=False))), clock=FakeClock()) as p:
        await p.check_required()
        assert p.open_servers == ("local",)
        assert "MCP server 'later'" in caplog.text


async def test_an_idle_session_is_closed_and_reopened_on_next_use(http_url: str) -> None:
    cfg = McpConfig(
        (McpServerConfig("remote", "streamable", url=http_url),),
        pool=McpPoolConfig(idle_timeout_secs=60.0),
    )
    clock = FakeClock()
    async with McpPool(cfg, clock=clock) as pool:
        assert (await pool.call_tool("remote", "echo", {"text": "a"})).text == "echo: a"
        assert pool.open_servers == ("remote",)
        await clock.advance(45.0)
        assert pool.open_servers == ("remote",)  # not idle long enough
        # a call in flight holds its session, whatever the clock says
        call = asyncio.create_task(pool.call_tool("remote", "nap", {"seconds": 2.0}))
        await asyncio.sleep(0.2)
        await clock.advance(120.0)
        assert pool.open_servers == ("remote",)
        assert (await call).text == "slept 2.0"
        await clock.advance(61.0)
        for _ in range(100):  # the transport closes in real time
            if not pool.open_servers:
                break
            await asyncio.sleep(0.05)
        assert pool.open_servers == ()
        assert (await pool.call_tool("remote", "echo", {"text": "b"})).text == "echo: b"
        assert pool.open_servers == ("remote",)


async def test_a_tool_output_is_cut_at_max_output_chars(http_url: str) -> None:
    cfg = McpConfig((McpServerConfig("remote", "streamable", url=http_url),))
    async with McpPool(cfg, clock=FakeClock(), max_output_chars=100) as pool:
        out = await pool.call_tool("remote", "big", {"chars": 5000})
        assert out.error is None
        assert out.text == "x" * 100 + "\n[output truncated: 5000 characters, 100 kept]"
        assert (await pool.call_tool("remote", "big", {"chars": 100})).text == "x" * 100
