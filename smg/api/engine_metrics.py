"""`GET /engine_metrics`: the workers' own Prometheus series, re-exported in one scrape.

As the Rust gateway does: every HTTP worker's server is scraped once (the DP ranks of one server
share it), all at once, each within `timeout_s`; its samples get a `worker_addr` label and the
families are merged (smg.metrics.exposition). A worker that fails (refused, timed out, not 200,
too large) is reported, not raised: `smg_engine_metrics_scrape_success{worker_addr}` is 0 for
it and the others' series are served. gRPC engines have no HTTP /metrics: they are left out
(their loads are on the gateway's own /metrics as `smg_engine_*`). No worker to scrape: 503.
A control-plane route (it is not under /v1/): the auth gate classes it admin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from smg import errors
from smg.core import dp
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.metrics.exposition import merge, status_family

Scrape = Callable[[WorkerSnapshot, str, float], Awaitable[tuple[int, bytes]]]


class EngineMetrics:
    def __init__(
        self,
        cell: SnapshotCell[RegistrySnapshot],
        scrape: Callable[[], Scrape | None],
        timeout_s: float,
    ) -> None:
        self.cell = cell
        self.scrape = scrape  # the workers' HTTP client's `scrape` (None: not serving yet)
        self.timeout_s = timeout_s

    def install(self, app: web.Application) -> None:
        app.router.add_get("/engine_metrics", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        servers: dict[str, WorkerSnapshot] = {}
        for w in self.cell.value.workers:
            base = dp.engine_url(w.url)
            if base.startswith(("http://", "https://")):
                servers.setdefault(base, w)
        scrape = self.scrape()
        if not servers or scrape is None:
            raise errors.ApiError(
                503, "no_workers", "No HTTP worker to scrape /metrics from", type="service_error"
            )
        texts: dict[str, str | None] = {}

        async def one(addr: str, w: WorkerSnapshot) -> None:
            try:
                async with asyncio.timeout(self.timeout_s):
                    status, body = await scrape(w, "/metrics", self.timeout_s)
                texts[addr] = body.decode("utf-8", "replace") if status == 200 else None
            except Exception:  # refused, timed out, too large: reported below, never raised
                texts[addr] = None

        async with asyncio.TaskGroup() as tg:
            for addr, w in servers.items():
                tg.create_task(one(addr, w), name=f"engine_metrics:{w.worker_id}")
        merged = merge((addr, text) for addr, text in texts.items() if text is not None)
        status = status_family((addr, texts.get(addr) is not None) for addr in servers)
        return web.Response(text=merged + status, content_type="text/plain", charset="utf-8")
