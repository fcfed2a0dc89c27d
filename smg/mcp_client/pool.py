"""The MCP client pool: one session per configured server, opened on first use, and sessions to
servers a request names by URL, for that request only.

Every session lives in one task of the pool's TaskGroup (smg/mcp_client/connection.py). Both
kinds are used through the same handle, `McpServer`:

- `pool.server(name)`: a configured server (raises `McpUnavailable` for an unknown name);
- `async with pool.request_server(label, url, headers, guard=...) as server`: a server named
  only by URL (OpenAI's `{"type": "mcp", "server_url": ...}` tool). The URL is checked first
  (`InvalidServerUrl`, a ValueError: the client's fault, a 400), then by `guard.check` (the
  gateway's AddressGuard, given the URL's origin: a ValueError it raises is an
  `InvalidServerUrl` too), and every connect of the session goes only to addresses
  `guard.resolve` allows (DNS rebinding gets nowhere; smg/mcp_client/guarded_http.py).
  `check_url=` alone (a check function, no connect-time guard) is accepted too. Its session
  opens on first use and closes when the block exits. At most `pool.max_connections` of them
  are open at once, pool-wide; past it `McpUnavailable`. Transport: a path containing `/sse` is
  SSE, else streamable HTTP; timeouts are the pool's `request_connect_timeout_s` /
  `request_timeout_s`. `authorization=` (OpenAI's field of that tool, as the Rust gateway takes
  it) is sent as `Authorization: Bearer ...`. Its headers and token appear in no log and no
  error.

On a handle:
- `list_tools()`: the server's tools, cached; a cached list is reused until the server sends
  `notifications/tools/list_changed` or it is older than `inventory.tool_ttl_secs` (read on the
  injected clock). A server that cannot be reached raises `McpUnavailable` (the loop decides).
- `call_tool(tool, arguments)`: never raises (but `CancelledError`): the tool's error, a deadline
  past `request_timeout_secs`, an unreachable server become a `ToolOutput` with an error code.
  At most `max_in_flight` calls per server run at once; the rest wait inside the deadline. The
  output text is cut at `max_output_chars`.

A configured server's session unused for `pool.idle_timeout` is closed (the next use reopens it).
`check_required()` at start: every configured server is tried at once; a `required: true` one
that cannot be reached raises `McpStartError` (a ConfigError: the gateway exits with one line
naming it), the others only log a warning.

Usage: `async with McpPool(cfg, clock=clock) as pool: ...` (the owner's scope owns its tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from smg.clock import Clock
from smg.config.knobs import ConfigError
from smg.config.mcp import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, McpConfig, McpServerConfig
from smg.mcp_client.connection import (
    Connection,
    McpUnavailable,
    ToolCache,
    cause,
    kind,
    list_all,
    log,
)
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
from smg.mcp_client.server_url import InvalidServerUrl, parse_server_url

if TYPE_CHECKING:  # the SDK and its httpx load with the first session (connection.py)
    from smg.mcp_client.guarded_http import Resolve

__all__ = [
    "InvalidServerUrl",
    "McpPool",
    "McpServer",
    "McpStartError",
    "McpUnavailable",
    "UrlGuard",
    "check_mcp_servers",
]

DEFAULT_MAX_IN_FLIGHT = 32  # tool calls at once per server
CLOSE_TIMEOUT_S = 5.0  # a request-level session's transport gets this long to close

CheckUrl = Callable[[str], Awaitable[object]]


class UrlGuard(Protocol):
    """The gateway's address policy as the pool uses it (smg's AddressGuard is one): `check` a
    URL before anything connects (a ValueError refuses it), `resolve` a host at every connect to
    the addresses it allows (getaddrinfo tuples; an OSError when there are none)."""

    async def check(self, url: str) -> object: ...

    async def resolve(self, host: str, port: int) -> list[tuple[Any, ...]]: ...


class McpStartError(ConfigError):
    """A `required: true` server could not be reached at start (names it, never its URL)."""


class McpServer:
    """One server as the tool loop sees it, configured or request-level alike."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, pool: McpPool, conn: Connection) -> None:
        self._pool = pool
        self._conn = conn

    @property
    def name(self) -> str:
        return self._conn.name

    async def list_tools(self) -> tuple[McpTool, ...]:
        return await self._pool._list(self._conn)

    async def call_tool(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        return await self._pool._call(self._conn, tool, arguments)


class McpPool:
    def __init__(
        self,
        cfg: McpConfig,
        *,
        clock: Clock,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_output_chars: int = DEFAULT_MAX_CHARS,
        request_connect_timeout_s: float = CONNECT_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._cfg = cfg
        self._clock = clock
        self._max_in_flight = max_in_flight
        self._max_output_chars = max_output_chars
        self._request_timeouts = (request_connect_timeout_s, request_timeout_s)
        self._conns = {s.name: Connection(s, max_in_flight) for s in cfg.servers}
        self._request_conns: set[Connection] = set()
        self._tg: asyncio.TaskGroup | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def __aenter__(self) -> McpPool:
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        if self._conns:
            self._sweeper = self._tg.create_task(self._sweep_idle(), name="mcp:idle")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close every session (each gets CLOSE_TIMEOUT_S, then is cancelled) and leave the
        TaskGroup. The body's own exception goes on as it is, not wrapped in a group."""
        tg, self._tg = self._tg, None
        if self._sweeper is not None:
            self._sweeper.cancel()
        conns = [*self._conns.values(), *self._request_conns]
        tasks = {c.task for c in conns if c.task is not None and not c.task.done()}
        for conn in conns:
            conn.close()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
            for task in late:
                task.cancel()
        if tg is not None:
            await tg.__aexit__(None, None, None)

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self._conns)

    @property
    def open_servers(self) -> tuple[str, ...]:
        """The configured servers whose session is open now."""
        return tuple(name for name, conn in self._conns.items() if conn.is_open)

    @property
    def request_sessions(self) -> int:
        """Request-level servers in use now (each holds at most one session)."""
        return len(self._request_conns)

    def server(self, name: str) -> McpServer:
        conn = self._conns.get(name)
        if conn is None:
            raise McpUnavailable(f"no MCP server named {name!r}")
        return McpServer(self, conn)

    async def list_tools(self, server: str) -> tuple[McpTool, ...]:
        return await self.server(server).list_tools()

    async def call_tool(self, server: str, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        conn = self._conns.get(server)
        if conn is None:
            return failure_output(server, tool, UNKNOWN_SERVER)
        return await self._call(conn, tool, arguments)

    @contextlib.asynccontextmanager
    async def request_server(
        self,
        label: str,
        url: str,
        headers: Mapping[str, str],
        *,
        authorization: str | None = None,
        guard: UrlGuard | None = None,
        check_url: CheckUrl | None = None,
    ) -> AsyncIterator[McpServer]:
        parsed = parse_server_url(label, url)
        if guard is not None and check_url is None:
            check_url = guard.check
        if check_url is not None:
            await _checked(label, parsed.origin, check_url)
        if self._tg is None:
            raise McpUnavailable(f"MCP server {label!r}: the pool is closed")
        limit = self._cfg.pool.max_connections
        if len(self._request_conns) >= limit:
            raise McpUnavailable(
                f"MCP server {label!r}: too many request-level MCP sessions open (at most {limit})"
            )
        connect_s, request_s = self._request_timeouts
        cfg = McpServerConfig(
            label,
            parsed.protocol,
            url=parsed.url,
            token=authorization or None,  # sent as `Authorization: Bearer ...`
            headers=tuple((str(k), str(v)) for k, v in headers.items()),
            connect_timeout_secs=connect_s,
            request_timeout_secs=request_s,
        )
        conn = Connection(cfg, self._max_in_flight, None if guard is None else _resolver(guard))
        self._request_conns.add(conn)
        try:
            yield McpServer(self, conn)
        finally:
            conn.retired = True
            try:
                await conn.closed(CLOSE_TIMEOUT_S)
            finally:
                self._request_conns.discard(conn)

    async def check_required(self) -> None:
        """Try every configured server at once (open and list its tools): raise McpStartError
        when a `required: true` one fails; log a warning for any other that fails."""
        failures: dict[str, str] = {}

        async def probe(conn: Connection) -> None:
            try:
                await self._list(conn)
            except McpUnavailable as exc:
                failures[conn.name] = str(exc)

        async with asyncio.TaskGroup() as tg:
            for conn in self._conns.values():
                tg.create_task(probe(conn), name=f"mcp-probe:{conn.name}")
        required = [n for n in self._conns if n in failures and self._conns[n].cfg.required]
        for name in failures:
            if name not in required:
                log.warning("mcp server unreachable at start (not required): %s", failures[name])
        if required:
            raise McpStartError(
                "required MCP server unreachable at start: "
                + "; ".join(failures[n] for n in required)
            )

    # --- one server ------------------------------------------------------------------------------
    async def _list(self, conn: Connection) -> tuple[McpTool, ...]:
        inv = self._cfg.inventory
        cache = conn.cache
        if conn.retired:
            raise McpUnavailable(f"MCP server {conn.name!r}: closed")
        if cache is not None and not cache.stale:
            fresh = self._clock.now() - cache.fetched_at < inv.tool_ttl_secs
            if fresh or not inv.enable_refresh:
                return cache.tools
        with self._held(conn):
            session = await conn.open(self._tg)  # under its own connect deadline
            async with self._deadline(conn):
                try:
                    tools = await list_all(conn.name, session)
                except (TimeoutError, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    self._broken(conn)
                    raise McpUnavailable(cause(conn.name, exc)) from None
        conn.cache = ToolCache(tools, self._clock.now())
        return tools

    async def _call(self, conn: Connection, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        from mcp.shared.exceptions import MCPError  # loaded by now: a session was opened

        server = conn.name
        timeout_s = conn.cfg.request_timeout_secs
        try:
            with self._held(conn):
                async with asyncio.timeout(timeout_s), conn.slots:
                    session = await conn.open(self._tg)
                    result = await session.call_tool(tool, dict(arguments))
        except TimeoutError:
            return failure_output(server, tool, TIMEOUT, f"no result within {timeout_s:g} s")
        except McpUnavailable:
            return failure_output(server, tool, UNAVAILABLE)
        except MCPError as exc:  # the server refused (unknown tool, bad arguments)
            return failure_output(server, tool, PROTOCOL_ERROR, _bounded_line(str(exc)))
        except Exception as exc:
            self._broken(conn)
            return failure_output(server, tool, UNAVAILABLE, kind(exc))
        if result.is_error and self._cfg.inventory.refresh_on_error and conn.cache is not None:
            conn.cache.stale = True
        blocks = [b.model_dump(mode="json", by_alias=True) for b in result.content]
        return result_output(
            server, tool, blocks, result.structured_content, result.is_error, self._max_output_chars
        )

    @contextlib.contextmanager
    def _held(self, conn: Connection) -> Any:
        """While a call or listing runs its session is not idle."""
        conn.holders += 1
        try:
            yield
        finally:
            conn.holders -= 1
            conn.last_used = self._clock.now()

    @contextlib.asynccontextmanager
    async def _deadline(self, conn: Connection) -> AsyncIterator[None]:
        timeout_s = conn.cfg.request_timeout_secs
        try:
            async with asyncio.timeout(timeout_s):
                yield
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server {conn.name!r}: no answer within {timeout_s:g} s"
            ) from None

    def _broken(self, conn: Connection) -> None:
        conn.close()
        if self._cfg.inventory.refresh_on_error and conn.cache is not None:
            conn.cache.stale = True

    async def _sweep_idle(self) -> None:
        """Close the configured servers' sessions unused for `pool.idle_timeout` (checked every
        quarter of it, on the injected clock)."""
        idle_s = self._cfg.pool.idle_timeout_secs
        while True:
            await self._clock.sleep(idle_s / 4)
            now = self._clock.now()
            for conn in self._conns.values():
                if conn.is_open and conn.holders == 0 and now - conn.last_used >= idle_s:
                    log.info("mcp session idle: closed", extra={"server": conn.name})
                    conn.close()


async def check_mcp_servers(cfg: McpConfig, clock: Clock) -> None:
    """The start check on a pool of its own (opened for it, then closed): for a gateway that
    holds no long-lived pool yet; one that does calls `pool.check_required()` instead."""
    if cfg.servers:
        async with McpPool(cfg, clock=clock) as pool:
            await pool.check_required()


def _resolver(guard: UrlGuard) -> Resolve:
    async def resolve(host: str, port: int) -> list[str]:
        return [str(info[4][0]) for info in await guard.resolve(host, port)]

    return resolve


async def _checked(label: str, origin: str, check_url: CheckUrl) -> None:
    try:
        await check_url(origin)
    except ValueError as exc:  # the address policy refused it (InvalidWorkerUrl and kin)
        log.info("mcp server_url refused", extra={"server": label, "reason": str(exc)})
        raise InvalidServerUrl(
            f"MCP server {label!r}: server_url is not allowed by the gateway's address policy"
        ) from None
    except (OSError, TimeoutError) as exc:
        raise McpUnavailable(cause(label, exc)) from None


def _bounded_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."
