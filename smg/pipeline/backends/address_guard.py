"""The worker address policy (`smg.core.worker_urls`) applied to real sockets.

Three places, one policy:

* registration (`check`): the URL's shape and every address its host resolves to (a name that
  resolves to one denied address among good ones is refused: it is not what it claims to be);
* every connect of the aiohttp client (`socket_factory`, handed to its `TCPConnector`): the
  address about to be connected is judged right there, after DNS, so a name that changes its
  answer after registration (DNS rebinding) gets nowhere; aiohttp's happy-eyeballs then tries
  the name's other addresses;
* every connect of the lean data paths, gRPC and HTTP/1.1 (`open_socket`): resolved here,
  denied addresses dropped, the rest tried in order.

Name resolution runs under a deadline (`resolve_timeout_s`). A name that does not resolve at
registration is accepted (a worker may come up later; the connect-time check still holds).
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import structlog

from smg.core.worker_urls import AddressPolicy, DeniedWorkerUrl, WorkerUrl

log = structlog.get_logger("smg.address_guard")

AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr), as getaddrinfo gives


class DeniedAddress(OSError):
    """A connect refused by the worker address policy (an OSError, as a refused connect is)."""

    def __init__(self, why: str) -> None:
        super().__init__(errno.EACCES, f"denied by the worker address policy: {why}")


class AddressGuard:
    def __init__(self, policy: AddressPolicy | None = None, resolve_timeout_s: float = 5.0):
        self.policy = policy or AddressPolicy()
        self.resolve_timeout_s = resolve_timeout_s

    # --- connect time ----------------------------------------------------------------------------
    def socket_factory(self, addr_info: AddrInfo) -> socket.socket:
        """aiohttp's `TCPConnector(socket_factory=...)`: a socket for an allowed address only."""
        family, type_, proto, _, sockaddr = addr_info
        why = self.policy.denied(sockaddr[0])
        if why is not None:
            log.warning("worker_connect_denied", reason=why)
            raise DeniedAddress(why)
        return socket.socket(family=family, type=type_, proto=proto)

    async def resolve(self, host: str, port: int) -> list[AddrInfo]:
        """The TCP addresses of `host` the policy allows; raises `DeniedAddress` when it has
        none, OSError/TimeoutError when it does not resolve in time."""
        infos = await self._getaddrinfo(host, port)
        allowed = [i for i in infos if self.policy.denied(i[4][0]) is None]
        if not allowed:
            raise DeniedAddress(f"every address of {host} is denied")
        return allowed

    async def open_socket(self, host: str, port: int) -> socket.socket:
        """A connected non-blocking socket to an allowed address of `host` (tried in order);
        for `loop.create_connection(..., sock=...)`. Callers bound the whole with a deadline."""
        if self.policy.name_denied(host) is not None:
            raise DeniedAddress(f"{host} names a cloud metadata service")
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for family, type_, proto, _, sockaddr in await self.resolve(host, port):
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
            except BaseException:
                sock.close()
                raise
        assert last is not None
        raise last

    # --- registration ----------------------------------------------------------------------------
    async def check(self, url: str) -> WorkerUrl:
        """Refuse a URL that is malformed (`InvalidWorkerUrl`), names a denied host or resolves
        to any denied address (`DeniedWorkerUrl`). A name that does not resolve passes."""
        parsed = self.policy.check(url)
        if parsed.address is not None:
            return parsed
        try:
            infos = await self._getaddrinfo(parsed.host, parsed.port)
        except (OSError, TimeoutError) as exc:
            log.info("worker_name_unresolved", host=parsed.host, error=str(exc))
            return parsed
        for info in infos:
            why = self.policy.denied(info[4][0])
            if why is not None:
                raise DeniedWorkerUrl(
                    f"workers may not be at this address: {parsed.host} resolves to {why}"
                )
        return parsed

    async def _getaddrinfo(self, host: str, port: int) -> list[AddrInfo]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.resolve_timeout_s):
            return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
