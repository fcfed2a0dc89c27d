"""Dev mode: a gateway on 127.0.0.1:30000 in front of simulated workers, in one process.

A newcomer gets a working OpenAI-compatible endpoint with one command; nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import dataclasses

import structlog
from aiohttp import web

from smg.api.gateway import Gateway
from smg.config import (
    GatewayConfig,
    HealthConfig,
    ObservabilityConfig,
    RoutingConfig,
    ServerConfig,
    SimConfig,
    WorkersConfig,
)
from smg.sim.http_worker import build_app

log = structlog.get_logger("smg.dev")


async def start_sim_workers(count: int, model: str) -> tuple[list[web.AppRunner], list[str]]:
    runners: list[web.AppRunner] = []
    urls: list[str] = []
    for i in range(count):
        cfg = SimConfig(host="127.0.0.1", port=0, model=model, seed=i, tokens_per_second=200.0)
        runner = web.AppRunner(build_app(cfg), access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    return runners, urls


async def run_dev(stop: asyncio.Event, *, port: int, workers: int, model: str, policy: str) -> None:
    runners, urls = await start_sim_workers(workers, model)
    cfg = GatewayConfig(
        server=ServerConfig(host="127.0.0.1", port=port, shutdown_grace_period_secs=5.0),
        workers=WorkersConfig(worker_urls=tuple(urls)),
        routing=dataclasses.replace(RoutingConfig(), policy=policy),
        health=dataclasses.replace(HealthConfig(), health_check_interval_secs=5.0),
        observability=dataclasses.replace(ObservabilityConfig(), prometheus_port=0),
    )
    print(
        f"smg dev: gateway on http://127.0.0.1:{port} (model '{model}') "
        f"in front of {workers} simulated workers: {' '.join(urls)}",
        flush=True,
    )
    try:
        await Gateway(cfg).run(stop)
    finally:
        for r in runners:
            await r.cleanup()
