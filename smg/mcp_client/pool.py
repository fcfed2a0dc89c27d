"""The MCP client pool: one session per configured server, opened on first use.

Each server's session lives in one task of the pool's TaskGroup (the SDK's transports and
sessions are anyio context managers: they must be entered and left by the same task). That task
says "ready" once the MCP `initialize` handshake is done, then waits until the pool closes or the
session breaks; a broken session is dropped and the next use opens a new one.

- `list_tools(server)`: the server's tools, cached; a cached list is reused until the server sends
  `notifications/tools/list_changed` or it is older than `inventory.tool_ttl_secs` (read on the
  injected clock). A server that cannot be reached raises `McpUnavailable` (the loop decides).
- `call_tool(server, tool, arguments)`: never raises (but `CancelledError`): the tool's error, a
  deadline past `request_timeout_secs`, an unreachable server become a `ToolOutput` with an error
  code. At most `max_in_flight` calls per server run at once; the rest wait inside the deadline.

Usage: `async with McpPool(cfg, clock=clock) as pool: ...` (the owner's scope owns its tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import mcp.types as mcp_types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from smg.clock import Clock
from smg.config.mcp import McpConfig, McpServerConfig
from smg.mcp_client.outputs import (
    DEFAULT_MAX_CHARS,
    PROTOCOL_ERROR,
    TIMEOUT,
    UNAVAILABLE,
    UNKNOWN_SERVER,
    McpTool,
    ToolOutput,
    failure_output,
    result_output,
)

log = logging.getLogger("smg.mcp_client")

DEFAULT_MAX_IN_FLIGHT = 32  # tool calls at once per server
MAX_TOOLS_PAGES = 32  # tools/list pages followed before giving up (a looping cursor)


class McpUnavailable(Exception):
    """A server's tools could not be listed: unknown, unreachable, or past its deadline. The
    message names the server and the cause's type, never a token, header or URL."""


@dataclass(slots=True)
class _Cache:
    tools: tuple[McpTool, ...]
    fetched_at: float
    stale: bool = False


class _Connection:
    """One server's session, owned by one task of the pool's TaskGroup."""

    def __init__(self, cfg: McpServerConfig) -> None:
        self.cfg = cfg
        self.session: ClientSession | None = None
        self.cache: _Cache | None = None
        self.opening: asyncio.Future[ClientSession] | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.cfg))
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                self.session = session
                ready.set_result(session)
                await self.stop.wait()
        except Exception as exc:  # the SDK raises many types; each becomes "unavailable"
            if not ready.done():
                ready.set_exception(McpUnavailable(_cause(self.cfg.name, exc)))
            else:
                log.warning(
                    "mcp session ended", extra={"server": self.cfg.name, "cause": _kind(exc)}
                )
        finally:
            self.session = None
            if not ready.done():  # cancelled before the handshake finished
                ready.set_exception(McpUnavailable(f"MCP server {self.cfg.name!r}: closed"))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification) and self.cache is not None:
            self.cache.stale = True
        elif isinstance(message, Exception):  # the transport broke: reopen on next use
            self.stop.set()


class McpPool:
    def __init__(
        self,
        cfg: McpConfig,
        *,
        clock: Clock,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_output_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self._cfg = cfg
        self._clock = clock
        self._max_output_chars = max_output_chars
        self._conns = {s.name: _Connection(s) for s in cfg.servers}
        self._slots = {s.name: asyncio.Semaphore(max_in_flight) for s in cfg.servers}
        self._tg: asyncio.TaskGroup | None = None

    async def __aenter__(self) -> McpPool:
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for conn in self._conns.values():
            conn.stop.set()
        tg, self._tg = self._tg, None
        if tg is not None:
            await tg.__aexit__(exc_type, exc, tb)

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self._conns)

    async def list_tools(self, server: str) -> tuple[McpTool, ...]:
        conn = self._conns.get(server)
        if conn is None:
            raise McpUnavailable(f"no MCP server named {server!r}")
        inv = self._cfg.inventory
        cache = conn.cache
        if cache is not None and not cache.stale:
            fresh = self._clock.now() - cache.fetched_at < inv.tool_ttl_secs
            if fresh or not inv.enable_refresh:
                return cache.tools
        async with self._deadline(conn):
            session = await self._session(conn)
            try:
                tools = await _list_all(server, session)
            except (TimeoutError, asyncio.CancelledError):
                raise
            except Exception as exc:
                self._broken(conn)
                raise McpUnavailable(_cause(server, exc)) from None
        conn.cache = _Cache(tools, self._clock.now())
        return tools

    async def call_tool(self, server: str, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        conn = self._conns.get(server)
        if conn is None:
            return failure_output(server, tool, UNKNOWN_SERVER)
        timeout_s = conn.cfg.request_timeout_secs
        try:
            async with asyncio.timeout(timeout_s), self._slots[server]:
                session = await self._session(conn)
                result = await session.call_tool(tool, dict(arguments))
        except TimeoutError:
            return failure_output(server, tool, TIMEOUT, f"no result within {timeout_s:g} s")
        except McpUnavailable:
            return failure_output(server, tool, UNAVAILABLE)
        except MCPError as exc:  # the server refused (unknown tool, bad arguments)
            return failure_output(server, tool, PROTOCOL_ERROR, _bounded_line(str(exc)))
        except Exception as exc:
            self._broken(conn)
            return failure_output(server, tool, UNAVAILABLE, _kind(exc))
        if result.is_error and self._cfg.inventory.refresh_on_error and conn.cache is not None:
            conn.cache.stale = True
        blocks = [b.model_dump(mode="json", by_alias=True) for b in result.content]
        return result_output(
            server, tool, blocks, result.structured_content, result.is_error, self._max_output_chars
        )

    @contextlib.asynccontextmanager
    async def _deadline(self, conn: _Connection) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(conn.cfg.request_timeout_secs):
                yield
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server {conn.cfg.name!r}: no answer within "
                f"{conn.cfg.request_timeout_secs:g} s"
            ) from None

    async def _session(self, conn: _Connection) -> ClientSession:
        """The server's open session, opening it (once, shared by concurrent callers) if needed."""
        if conn.session is not None and not conn.stop.is_set():
            return conn.session
        if conn.opening is None or conn.opening.done():
            if self._tg is None:
                raise McpUnavailable(f"MCP server {conn.cfg.name!r}: the pool is closed")
            if conn.task is not None and not conn.task.done():
                conn.stop.set()  # the old session is broken; let its task leave
            conn.stop = asyncio.Event()
            conn.opening = asyncio.get_running_loop().create_future()
            conn.task = self._tg.create_task(conn.run(conn.opening), name=f"mcp:{conn.cfg.name}")
        opening = conn.opening
        try:
            async with asyncio.timeout(conn.cfg.connect_timeout_secs):
                return await asyncio.shield(opening)
        except TimeoutError:
            if conn.opening is opening and conn.task is not None:
                conn.task.cancel()  # a hung spawn or handshake is given up
            raise McpUnavailable(f"MCP server {conn.cfg.name!r}: connect timed out") from None

    def _broken(self, conn: _Connection) -> None:
        conn.stop.set()
        if self._cfg.inventory.refresh_on_error and conn.cache is not None:
            conn.cache.stale = True


async def _list_all(server: str, session: ClientSession) -> tuple[McpTool, ...]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOLS_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(
            McpTool(server, t.name, t.description or "", dict(t.input_schema)) for t in page.tools
        )
        cursor = page.next_cursor
        if not cursor:
            return tuple(tools)
    raise McpUnavailable(f"MCP server {server!r}: more than {MAX_TOOLS_PAGES} pages of tools")


def _transport(cfg: McpServerConfig) -> contextlib.AbstractAsyncContextManager[Any]:
    if cfg.protocol == "stdio":
        assert cfg.command is not None
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.envs))
        return stdio_client(params)
    assert cfg.url is not None
    headers = dict(cfg.headers)
    if cfg.token:
        headers["Authorization"] = f"Bearer {cfg.token}"
    if cfg.protocol == "sse":
        return sse_client(cfg.url, headers=headers, timeout=cfg.connect_timeout_secs)
    client = create_mcp_http_client(headers=headers)
    return _owned_http(cfg.url, client)


@contextlib.asynccontextmanager
async def _owned_http(url: str, client: Any) -> AsyncIterator[Any]:
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def _kind(exc: BaseException) -> str:
    """An exception as a log/output word: its type, never its message (which may hold a URL)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return type(exc).__name__


def _cause(server: str, exc: BaseException) -> str:
    return f"MCP server {server!r}: {_kind(exc)}"


def _bounded_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."
