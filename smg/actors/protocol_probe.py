"""Which protocol a discovered pod's port speaks, as the Rust gateway decides it for a bare
host:port: HTTP and gRPC are tried at once and HTTP wins when both answer.

HTTP answers when GET <health endpoint> returns a status below 400. gRPC answers when the port
is a gRPC server: the standard health service's Check returns, or the server says it has no
such service (UNIMPLEMENTED / NOT_FOUND: still a gRPC server). Each try has the health-check
timeout; neither answering leaves the pod for the next reconcile.
"""

from __future__ import annotations

import asyncio

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

_GRPC_SERVER_CODES = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND)


class ProtocolProbe:
    def __init__(self, session: aiohttp.ClientSession, health_path: str, timeout_s: float) -> None:
        self.session = session  # the workers' session: the address policy on every connect
        self.health_path = health_path
        self.timeout_s = timeout_s

    async def __call__(self, host_port: str) -> str | None:
        """ "http", "grpc", or None when neither answers."""
        async with asyncio.TaskGroup() as tg:
            http = tg.create_task(self._http(host_port))
            grpc_ = tg.create_task(self._grpc(host_port))
        if http.result():
            return "http"
        return "grpc" if grpc_.result() else None

    async def _http(self, host_port: str) -> bool:
        url = f"http://{host_port}{self.health_path}"
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with self.session.get(url, timeout=timeout) as resp:
                return resp.status < 400
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return False

    async def _grpc(self, host_port: str) -> bool:
        try:
            async with grpc.aio.insecure_channel(host_port) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=self.timeout_s)
                return True
        except grpc.aio.AioRpcError as err:
            return err.code() in _GRPC_SERVER_CODES
        except (TimeoutError, OSError, ValueError):
            return False
