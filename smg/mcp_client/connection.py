"""One MCP server's session, owned by one task of the pool's TaskGroup.

The SDK's transports and sessions are anyio context managers: they must be entered and left by
the same task. `Connection.run` is that task: it says "ready" once the MCP `initialize` handshake
is done, then waits until it is told to stop or the session breaks; a broken session is dropped
and the next `open` starts a new task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smg.config.mcp import McpServerConfig
from smg.mcp_client.outputs import McpTool

# The MCP SDK (and its httpx) is imported when a session is first opened, not with the gateway:
# it is over half of the gateway's import time (1.4 s of 2.6 s), and most gateways never open one.
if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from smg.mcp_client.guarded_http import Resolve

log = logging.getLogger("smg.mcp_client")

MAX_TOOLS_PAGES = 32  # tools/list pages followed before giving up (a looping cursor)


class McpUnavailable(Exception):
    """A server's tools could not be listed: unknown, unreachable, or past its deadline. The
    message names the server and the cause's type, never a token, header or URL."""


@dataclass(slots=True)
class ToolCache:
    tools: tuple[McpTool, ...]
    fetched_at: float
    stale: bool = False


class Connection:
    """A server's session and what is known of it: its cached tools, when it was last used and
    how many calls hold it now (an idle sweep closes only a session nobody holds)."""

    def __init__(
        self, cfg: McpServerConfig, max_in_flight: int, resolve: Resolve | None = None
    ) -> None:
        self.cfg = cfg
        self.resolve = resolve  # given: every connect goes to the addresses it allows
        self.slots = asyncio.Semaphore(max_in_flight)
        self.session: ClientSession | None = None
        self.cache: ToolCache | None = None
        self.opening: asyncio.Future[ClientSession] | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.last_used = 0.0
        self.holders = 0
        self.retired = False  # a request-level server whose block has exited: never reopened

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def is_open(self) -> bool:
        return self.task is not None and not self.task.done()

    async def open(self, tg: asyncio.TaskGroup | None) -> ClientSession:
        """The open session, opening it (once, shared by concurrent callers) if needed, in `tg`;
        raises McpUnavailable past `connect_timeout_secs` or when the server cannot be reached."""
        if self.session is not None and not self.stop.is_set():
            return self.session
        if self.opening is None or self.opening.done():
            if tg is None or self.retired:
                raise McpUnavailable(f"MCP server {self.name!r}: closed")
            if self.is_open:
                self.stop.set()  # the old session is broken; let its task leave
            self.stop = asyncio.Event()
            self.opening = asyncio.get_running_loop().create_future()
            self.opening.add_done_callback(_retrieved)  # a failure nobody waits for is no error
            self.task = tg.create_task(self._run(self.opening), name=f"mcp:{self.name}")
        opening = self.opening
        try:
            async with asyncio.timeout(self.cfg.connect_timeout_secs):
                return await asyncio.shield(opening)
        except TimeoutError:
            if self.opening is opening and self.task is not None:
                self.task.cancel()  # a hung spawn or handshake is given up
            raise McpUnavailable(f"MCP server {self.name!r}: connect timed out") from None

    def close(self) -> None:
        """Tell the session's task to leave (it closes the transport itself)."""
        self.stop.set()

    async def closed(self, timeout_s: float) -> None:
        """Close and wait (at most `timeout_s`, then cancel) until the session's task has left."""
        self.stop.set()
        task = self.task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        from mcp.client.session import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(transport(self.cfg, self.resolve))
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message)
                )
                await session.initialize()
                self.session = session
                ready.set_result(session)
                await self.stop.wait()
        except Exception as exc:  # the SDK raises many types; each becomes "unavailable"
            if not ready.done():
                ready.set_exception(McpUnavailable(cause(self.name, exc)))
            else:
                log.warning("mcp session ended", extra={"server": self.name, "cause": kind(exc)})
        finally:
            self.session = None
            if not ready.done():  # cancelled before the handshake finished
                ready.set_exception(McpUnavailable(f"MCP server {self.name!r}: closed"))

    async def _on_message(self, message: Any) -> None:
        import mcp.types as mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification) and self.cache is not None:
            self.cache.stale = True
        elif isinstance(message, Exception):  # the transport broke: reopen on next use
            self.stop.set()


def _retrieved(future: asyncio.Future[ClientSession]) -> None:
    if not future.cancelled():
        future.exception()


async def list_all(server: str, session: ClientSession) -> tuple[McpTool, ...]:
    import mcp.types as mcp_types

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


def transport(
    cfg: McpServerConfig, resolve: Resolve | None = None
) -> contextlib.AbstractAsyncContextManager[Any]:
    from mcp.client.sse import sse_client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from smg.mcp_client.guarded_http import guarded_client_factory

    if cfg.protocol == "stdio":
        assert cfg.command is not None
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.envs))
        return stdio_client(params)
    assert cfg.url is not None
    headers = dict(cfg.headers)
    if cfg.token:
        headers["Authorization"] = f"Bearer {cfg.token}"
    factory = create_mcp_http_client if resolve is None else guarded_client_factory(resolve)
    if cfg.protocol == "sse":
        return sse_client(
            cfg.url, headers=headers, timeout=cfg.connect_timeout_secs, httpx_client_factory=factory
        )
    client = factory(headers=headers)
    return _owned_http(cfg.url, client)


@contextlib.asynccontextmanager
async def _owned_http(url: str, client: Any) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def kind(exc: BaseException) -> str:
    """An exception as a log/output word: its type, never its message (which may hold a URL)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return type(exc).__name__


def cause(server: str, exc: BaseException) -> str:
    return f"MCP server {server!r}: {kind(exc)}"
