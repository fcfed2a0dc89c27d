"""Request-level MCP servers (OpenAI's `{"type": "mcp", "server_url": ...}` tool) through
`McpPool.request_server`, against the real SDK test servers over streamable HTTP and SSE on
loopback: the transport follows the URL, the request's headers reach the server, the session
closes with the block, the pool-wide bound holds, the gateway's address policy is applied, and
the headers (the client's tokens) appear in no error and no log."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest

from smg.clock import FakeClock
from smg.config.mcp import McpConfig, McpPoolConfig, McpServerConfig
from smg.core.worker_urls import AddressPolicy
from smg.mcp_client.outputs import UNAVAILABLE
from smg.mcp_client.pool import InvalidServerUrl, McpPool, McpServer, McpUnavailable
from smg.pipeline.backends.address_guard import AddressGuard, DeniedAddress

from .spawn import free_port

pytestmark = pytest.mark.integration

HEADERS = {"Authorization": "Bearer tok-SECRET", "X-Tenant": "tenant-SECRET"}


@pytest.fixture(params=["streamable", "sse"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("http_url" if request.param == "streamable" else "sse_url"))


async def test_a_server_named_by_url_lists_and_calls_with_the_request_headers(url: str) -> None:
    async with McpPool(McpConfig(), clock=FakeClock()) as pool:
        async with pool.request_server("deepwiki", url, HEADERS) as server:
            assert pool.request_sessions == 1
            tools = {t.name: t for t in await server.list_tools()}
            assert {"echo", "add", "whoami"} <= set(tools)
            assert tools["add"].server == "deepwiki" == server.name
            out = await server.call_tool("add", {"a": 2, "b": 40})
            assert (out.server, out.tool, out.text, out.error) == ("deepwiki", "add", "42", None)
            who = await server.call_tool("whoami", {})
            assert who.text == "Bearer tok-SECRET / tenant-SECRET"
        assert pool.request_sessions == 0
        # the block is over: the handle does not reopen a session behind the pool's back
        with pytest.raises(McpUnavailable, match="'deepwiki': closed"):
            await server.list_tools()
        assert (await server.call_tool("echo", {"text": "x"})).error == UNAVAILABLE


async def test_configured_and_request_level_servers_are_the_same_kind_of_handle(
    http_url: str, sse_url: str
) -> None:
    cfg = McpConfig((McpServerConfig("conf", "streamable", url=http_url),))
    async with McpPool(cfg, clock=FakeClock()) as pool:
        configured = pool.server("conf")
        async with pool.request_server("req", sse_url, {}) as requested:
            for server in (configured, requested):
                assert isinstance(server, McpServer)
                assert "echo" in {t.name for t in await server.list_tools()}
                out = await server.call_tool("echo", {"text": server.name})
                assert out.text == f"echo: {server.name}"
        with pytest.raises(McpUnavailable, match="no MCP server named 'nope'"):
            pool.server("nope")


async def test_two_requests_naming_one_url_get_their_own_sessions(http_url: str) -> None:
    async with McpPool(McpConfig(), clock=FakeClock()) as pool:

        async def use(tenant: str) -> str:
            async with pool.request_server("s", http_url, {"X-Tenant": tenant}) as server:
                return (await server.call_tool("whoami", {})).text

        assert await asyncio.gather(use("a"), use("b")) == ["none / a", "none / b"]
        assert pool.request_sessions == 0
        async with pool.request_server("s", http_url, {}, authorization="tok-B") as server:
            assert (await server.call_tool("whoami", {})).text == "Bearer tok-B / none"


async def test_at_most_max_connections_request_sessions_at_once(http_url: str) -> None:
    cfg = McpConfig(pool=McpPoolConfig(max_connections=2))
    async with McpPool(cfg, clock=FakeClock()) as pool:
        async with pool.request_server("a", http_url, {}), pool.request_server("b", http_url, {}):
            with pytest.raises(McpUnavailable, match="too many request-level MCP sessions"):
                async with pool.request_server("c", http_url, {}):
                    pass
            assert pool.request_sessions == 2
        async with pool.request_server("c", http_url, {}) as server:  # room again
            assert (await server.call_tool("echo", {"text": "c"})).text == "echo: c"


async def test_the_address_policy_judges_the_url_before_any_connect(http_url: str) -> None:
    loopback_ok = AddressGuard(AddressPolicy())
    async with McpPool(McpConfig(), clock=FakeClock()) as pool:
        async with pool.request_server("s", http_url, {}, check_url=loopback_ok.check) as server:
            assert (await server.call_tool("echo", {"text": "ok"})).text == "echo: ok"
        only_private = AddressGuard(AddressPolicy(allow=["10.0.0.0/8"]))
        with pytest.raises(InvalidServerUrl) as info:
            async with pool.request_server("s", http_url, HEADERS, guard=only_private):
                pytest.fail("a refused URL opened a block")
        text = str(info.value)
        assert text.startswith("MCP server 's': server_url is not allowed")
        assert "SECRET" not in text and http_url not in text
        metadata = "http://169.254.169.254/mcp"
        with pytest.raises(InvalidServerUrl):
            async with pool.request_server("s", metadata, {}, check_url=loopback_ok.check):
                pass
        assert pool.request_sessions == 0


async def test_every_connect_goes_where_the_guard_resolves(url: str) -> None:
    """A name only the guard knows (`.invalid` never resolves in DNS) reaches the loopback
    server: the session's connects ask the guard, not the system resolver."""

    class PrivateDns(AddressGuard):
        async def _getaddrinfo(self, host: str, port: int) -> list[tuple[Any, ...]]:
            assert host == "mcp.test.invalid"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    named = url.replace("127.0.0.1", "mcp.test.invalid")
    async with McpPool(McpConfig(), clock=FakeClock()) as pool:
        async with pool.request_server("s", named, HEADERS, guard=PrivateDns()) as server:
            assert (await server.call_tool("whoami", {})).text.startswith("Bearer tok-SECRET")


async def test_a_name_that_rebinds_to_a_denied_address_gets_nowhere(url: str) -> None:
    """The URL passed its check (as a public name would), then resolves to loopback, which this
    policy denies: the connect is refused, the server never sees the request."""

    class Rebinding(AddressGuard):
        async def check(self, url: str) -> None:
            return None  # the first answer was a good one

    guard = Rebinding(AddressPolicy(allow=["10.0.0.0/8"]))
    with pytest.raises(DeniedAddress):
        await guard.resolve("127.0.0.1", 80)  # what every connect of the session will meet
    async with McpPool(McpConfig(), clock=FakeClock(), request_connect_timeout_s=5.0) as pool:
        async with pool.request_server("s", url, HEADERS, guard=guard) as server:
            with pytest.raises(McpUnavailable) as info:
                await server.list_tools()
            out = await server.call_tool("echo", {"text": "x"})
        assert out.error == UNAVAILABLE and "SECRET" not in str(info.value) + out.text


async def test_the_url_is_checked_for_shape_first() -> None:
    async with McpPool(McpConfig(), clock=FakeClock()) as pool:
        for bad in ("ftp://127.0.0.1/mcp", "http://u:tok-SECRET@127.0.0.1/mcp", "not a url"):
            with pytest.raises(InvalidServerUrl) as info:
                async with pool.request_server("s", bad, HEADERS):
                    pass
            assert "SECRET" not in str(info.value)


async def test_a_request_server_that_is_down_leaks_no_header_into_errors_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    down = f"http://127.0.0.1:{free_port()}/mcp"
    async with McpPool(McpConfig(), clock=FakeClock(), request_connect_timeout_s=5.0) as pool:
        async with pool.request_server("gone", down, HEADERS) as server:
            with pytest.raises(McpUnavailable) as info:
                await server.list_tools()
            out = await server.call_tool("echo", {"text": "x"})
        assert "'gone'" in str(info.value) and out.error == UNAVAILABLE and "'gone'" in out.text
        for text in (str(info.value), out.text, caplog.text):
            assert "SECRET" not in text
        assert pool.request_sessions == 0
