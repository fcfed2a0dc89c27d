"""HTTP clients for request-level MCP servers whose every connect is judged where it happens.

A URL checked once and then connected by name can be pointed elsewhere by DNS in between (DNS
rebinding). So the httpx client of a request-level session connects through `_GuardedBackend`:
its `connect_tcp` asks `resolve(host, port)` (the gateway's address policy: only the allowed
addresses of the name, or an OSError) and connects to those addresses, in order. TLS still
verifies and sends SNI for the URL's host name (httpcore takes both from the origin).

`httpcore2` takes a network backend only through its connection pool; `httpx2`'s transport
builds that pool itself, so the backend is put in place on it (`_network_backend`), checked at
construction so an SDK that moves it fails loudly, not silently unguarded. The client takes
no proxy from the environment (`trust_env=False`: a proxy would make the connects the guard's
blind spot); certificates still follow SSL_CERT_FILE (the transport's own setting).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpcore2
import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

# the allowed addresses of (host, port), in the order to try; raises OSError when there are none
Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, resolve: Resolve) -> None:
        self._inner = httpcore2.AnyIOBackend()
        self._resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        last: Exception | None = None
        for address in await self._resolve(host, port):
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last = exc
        raise last or httpcore2.ConnectError("no allowed address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("request-level MCP servers are reached over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_client_factory(resolve: Resolve) -> Callable[..., httpx2.AsyncClient]:
    """An `McpHttpClientFactory` (headers, timeout, auth) whose clients connect only to the
    addresses `resolve` allows."""

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        transport = httpx2.AsyncHTTPTransport()
        pool = getattr(transport, "_pool", None)
        if not isinstance(pool, httpcore2.AsyncConnectionPool) or not hasattr(
            pool, "_network_backend"
        ):
            raise RuntimeError("httpx2's transport has no connection pool to guard")
        pool._network_backend = _GuardedBackend(resolve)
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout
            or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            auth=auth,
            transport=transport,
            trust_env=False,  # no HTTP(S)_PROXY from the environment: it would bypass the guard
        )

    return factory
