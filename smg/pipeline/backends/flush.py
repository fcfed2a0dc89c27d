"""Flushing one worker's prefix (KV) cache, as `POST /flush_cache` fans it out.

HTTP workers get `POST /flush_cache` (SGLang's admin endpoint) with the worker's credential; gRPC
engines the engine contract's `FlushCache` call (both runtimes). A worker that does not flush
raises `FlushFailed` with a short reason (its status and message, never a credential).
"""

from __future__ import annotations

import aiohttp
import grpc

from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.grpc_errors import EngineError
from smg.pipeline.backends.grpc_pool import EnginePool, is_grpc_url
from smg.pipeline.backends.http import HttpBackend, ResponseTooLarge, UpstreamError

_REASON_CHARS = 200


class FlushFailed(Exception):
    pass


class CacheFlusher:
    def __init__(self, http: HttpBackend | None, engines: EnginePool, timeout_s: float) -> None:
        self.http = http
        self.engines = engines
        self.timeout_s = timeout_s

    async def __call__(self, worker: WorkerSnapshot) -> None:
        try:
            if is_grpc_url(worker.url):
                await self._grpc(worker)
            else:
                await self._http(worker)
        except FlushFailed:
            raise
        except TimeoutError:
            raise FlushFailed(f"no answer in {self.timeout_s:g} s") from None
        except (
            UpstreamError,
            EngineError,
            grpc.aio.AioRpcError,
            aiohttp.ClientError,
            OSError,
            ResponseTooLarge,
        ) as exc:
            raise FlushFailed(_short(f"{type(exc).__name__}: {exc}")) from None

    async def _grpc(self, worker: WorkerSnapshot) -> None:
        client = await self.engines.connect(worker.url)
        ok, message = await client.flush_cache(self.timeout_s)
        if not ok:
            raise FlushFailed(_short(message or "the engine did not flush its cache"))

    async def _http(self, worker: WorkerSnapshot) -> None:
        if self.http is None:
            raise FlushFailed("no HTTP client (the gateway is not serving)")
        status, data = await self.http.control(worker, "POST", "/flush_cache", self.timeout_s)
        if status != 200:
            detail = f": {data}" if isinstance(data, (str, dict)) else ""
            raise FlushFailed(_short(f"HTTP {status}{detail}"))


def _short(text: str) -> str:
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."
