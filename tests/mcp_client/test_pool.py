"""The MCP client pool (smg/mcp_client/pool.py) against real MCP servers written with the
official SDK's server side (tests/mcp_client/mcp_servers.py): one over stdio, one over streamable
HTTP and one over SSE on loopback ports. Lists tools (cached; refreshed on list_changed and past
the TTL), calls tools, and turns a raising tool, a tool past its deadline and a server that is
down into tool outputs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smg.clock import FakeClock
from smg.config.mcp import McpConfig, McpInventoryConfig, McpServerConfig
from smg.mcp_client.outputs import PROTOCOL_ERROR, TIMEOUT, TOOL_ERROR, UNAVAILABLE, UNKNOWN_SERVER
from smg.mcp_client.pool import McpPool, McpUnavailable

from .spawn import SERVER, free_port

# serial: its 5 s tool deadlines were missed (stdio calls timed out) in 3 of 3 runs under xdist
# on the shared box, never serially; the cause is not found yet
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _stdio(**kw: object) -> McpServerConfig:
    return McpServerConfig("local", "stdio", command=sys.executable, args=(SERVER, "stdio"), **kw)  # type: ignore[arg-type]


def _http(url: str, **kw: object) -> McpServerConfig:
    return McpServerConfig("remote", "streamable", url=url, token="tok-SECRET", **kw)  # type: ignore[arg-type]


def _sse(url: str, **kw: object) -> McpServerConfig:
    return McpServerConfig("events", "sse", url=url, token="tok-SECRET", **kw)  # type: ignore[arg-type]


def _config(*servers: McpServerConfig, ttl_s: float = 300.0) -> McpConfig:
    return McpConfig(servers, inventory=McpInventoryConfig(tool_ttl_secs=ttl_s))


@pytest.fixture(params=["stdio", "streamable", "sse"])
def server(request: pytest.FixtureRequest) -> McpServerConfig:
    if request.param == "stdio":
        return _stdio(request_timeout_secs=5.0)
    if request.param == "sse":
        return _sse(request.getfixturevalue("sse_url"), request_timeout_secs=5.0)
    return _http(request.getfixturevalue("http_url"), request_timeout_secs=5.0)


async def test_lists_and_calls_tools(server: McpServerConfig) -> None:
    async with McpPool(_config(server), clock=FakeClock()) as pool:
        tools = {t.name: t for t in await pool.list_tools(server.name)}
        assert {"echo", "add", "fail", "nap", "grow"} <= set(tools)
        assert tools["add"].server == server.name
        assert tools["add"].description == "Add two integers."
        assert set(tools["add"].input_schema["properties"]) == {"a", "b"}
        out = await pool.call_tool(server.name, "echo", {"text": "hi"})
        assert (out.text, out.error, out.is_error) == ("echo: hi", None, False)
        assert (await pool.call_tool(server.name, "add", {"a": 2, "b": 40})).text == "42"


async def test_concurrent_calls_share_one_session(server: McpServerConfig) -> None:
    async with McpPool(_config(server), clock=FakeClock()) as pool:
        outs = await asyncio.gather(
            *(pool.call_tool(server.name, "add", {"a": i, "b": 1}) for i in range(8))
        )
        assert [o.text for o in outs] == [str(i + 1) for i in range(8)]


async def test_a_raising_tool_is_an_error_output(server: McpServerConfig) -> None:
    async with McpPool(_config(server), clock=FakeClock()) as pool:
        out = await pool.call_tool(server.name, "fail", {"message": "disk full"})
        assert out.error == TOOL_ERROR and "boom: disk full" in out.text
        crash = await pool.call_tool(server.name, "crash", {})
        assert crash.error == TOOL_ERROR and "crash" in crash.text
        # the session is still good
        assert (await pool.call_tool(server.name, "echo", {"text": "ok"})).text == "echo: ok"


async def test_an_unknown_tool_or_bad_arguments_are_error_outputs(server: McpServerConfig) -> None:
    async with McpPool(_config(server), clock=FakeClock()) as pool:
        missing = await pool.call_tool(server.name, "nope", {})
        assert missing.is_error and missing.error in (TOOL_ERROR, PROTOCOL_ERROR)
        assert "nope" in missing.text
        bad = await pool.call_tool(server.name, "add", {"a": "x"})
        assert bad.is_error


async def test_a_tool_past_its_deadline_is_a_timeout_output(server: McpServerConfig) -> None:
    import dataclasses

    # 2 s: short against the tool's 30, long enough for a busy box's other calls to make it
    slow = dataclasses.replace(server, request_timeout_secs=2.0)
    async with McpPool(_config(slow), clock=FakeClock()) as pool:
        await pool.list_tools(slow.name)  # connected: the deadline below is the call's alone
        started = time.monotonic()
        out = await pool.call_tool(slow.name, "nap", {"seconds": 30})
        assert time.monotonic() - started < 10
        assert out.error == TIMEOUT and "timed out" in out.text and "2 s" in out.text
        # the server and the session survive a call given up on
        assert (await pool.call_tool(slow.name, "echo", {"text": "x"})).text == "echo: x"


async def test_list_changed_refreshes_the_cached_tools(server: McpServerConfig) -> None:
    async with McpPool(_config(server), clock=FakeClock()) as pool:
        before = {t.name for t in await pool.list_tools(server.name)}
        assert "grown" not in before
        assert (await pool.call_tool(server.name, "grow", {})).text == "grew"
        for _ in range(50):  # the notification may trail the call's result
            after = {t.name for t in await pool.list_tools(server.name)}
            if "grown" in after:
                break
            await asyncio.sleep(0.05)
        assert "grown" in after


async def test_the_tool_list_is_cached_until_the_ttl(http_url: str) -> None:
    cfg = _http(http_url)
    clock = FakeClock()
    async with McpPool(_config(cfg, ttl_s=60.0), clock=clock) as pool:
        first = await pool.list_tools("remote")
        assert await pool.list_tools("remote") is first  # cached: the same tuple
        await clock.advance(61.0)
        again = await pool.list_tools("remote")
        assert again is not first and {t.name for t in again} >= {t.name for t in first}


async def test_a_server_that_is_down_is_an_unavailable_output() -> None:
    down = _http(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_secs=5.0)
    gone = McpServerConfig("gone", "stdio", command="/nonexistent/mcp-server")
    async with McpPool(_config(down, gone), clock=FakeClock()) as pool:
        for name in ("remote", "gone"):
            out = await pool.call_tool(name, "echo", {"text": "x"})
            assert out.error == UNAVAILABLE and name in out.text
            assert "tok-SECRET" not in out.text and "127.0.0.1" not in out.text
            with pytest.raises(McpUnavailable) as info:
                await pool.list_tools(name)
            assert "tok-SECRET" not in str(info.value)
        unknown = await pool.call_tool("nobody", "echo", {})
        assert unknown.error == UNKNOWN_SERVER


async def test_a_server_that_comes_back_is_reconnected(tmp_path: Path) -> None:
    port = free_port()
    cfg = _http(f"http://127.0.0.1:{port}/mcp", connect_timeout_secs=5.0)
    async with McpPool(_config(cfg), clock=FakeClock()) as pool:
        assert (await pool.call_tool("remote", "echo", {"text": "x"})).error == UNAVAILABLE
        proc = await asyncio.create_subprocess_exec(
            sys.executable, SERVER, "streamable-http", str(port),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(100):
                out = await pool.call_tool("remote", "echo", {"text": "back"})
                if not out.is_error:
                    break
                await asyncio.sleep(0.2)
            assert out.text == "echo: back"
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
