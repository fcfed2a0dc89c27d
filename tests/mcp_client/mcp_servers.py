"""A real MCP server written with the official SDK's server side (`MCPServer`, FastMCP's 2.x
name), for the pool's tests. Run: `python tests/mcp_client/mcp_servers.py stdio`,
`python tests/mcp_client/mcp_servers.py streamable-http PORT` (at /mcp) or
`python tests/mcp_client/mcp_servers.py sse PORT` (at /sse, messages at /messages/).

Tools: `echo`, `add`, `fail` (raises ToolError), `crash` (raises ValueError), `big` (a long
answer), `nap` (sleeps), `whoami` (the
request's auth headers), `grow` (adds the tool `grown` and sends
`notifications/tools/list_changed`)."""

from __future__ import annotations

import asyncio
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

server = MCPServer("smg-test")
# the SDK's DNS-rebinding protection for a loopback server, plus the name the address-guard tests
# resolve to loopback themselves (`mcp.test.invalid`, unknown to any DNS)
SECURITY = TransportSecuritySettings(
    allowed_hosts=["127.0.0.1:*", "localhost:*", "mcp.test.invalid:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
)


@server.tool()
def echo(text: str) -> str:
    """Answer the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(message: str) -> str:
    """Always fail, with a message meant for the model."""
    raise ToolError(f"boom: {message}")


@server.tool()
def crash() -> str:
    """Always crash (the SDK hides an unexpected exception's message from the client)."""
    raise ValueError("internal detail")


@server.tool()
def big(chars: int) -> str:
    """Answer `chars` characters."""
    return "x" * chars


@server.tool()
async def nap(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


def grown() -> str:
    """A tool that exists only after `grow`."""
    return "grown"


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization and X-Tenant headers this call came with (HTTP transports)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", {})
    return f"{headers.get('authorization', 'none')} / {headers.get('x-tenant', 'none')}"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and tell the client its tool list changed."""
    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grew"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    elif sys.argv[1] == "sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]), transport_security=SECURITY)
    else:
        port = int(sys.argv[2])
        server.run("streamable-http", host="127.0.0.1", port=port, transport_security=SECURITY)
