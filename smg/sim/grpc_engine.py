"""The simulated gRPC inference engine (`smg sim --grpc --runtime vllm|sglang`).

Serves `vllm.grpc.engine.VllmEngine` or `sglang.grpc.scheduler.SglangScheduler` from PyPI
`smg-grpc-proto` plus the standard `grpc.health.v1.Health` (SERVING), with the real Qwen3
tokenizer, so the gateway, tests and benchmarks run end to end without a GPU. The servicers
(`grpc_servicers`) only translate: `engine_actor.SimEngine` does the work, `grpc_wire` holds each
runtime's wire format (and the list of runtime differences), `engine_core` the timing model,
`prefix_cache` the cached blocks, `script` the output text.

RPCs: Generate, HealthCheck, Abort, GetModelInfo, GetServerInfo, GetLoads, GetTokenizer (a
deterministic zip of the tokenizer folder in 512 KiB chunks, sha256 hex of the whole zip on
the last chunk only), SubscribeKvEvents, FlushCache; Embed, profiling and LoRA are UNIMPLEMENTED.

Other processes read the engine's counters from the `x-smg-sim-stats` trailing metadata of
GetServerInfo (JSON, both runtimes; `fetch_stats` does it), from SGLang's
`scheduler_info.sim_stats`, or from `GET /sim/stats` on `--stats-port`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sgl
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sgl_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vll
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vll_grpc

from smg.sim.engine_actor import EngineStats, GrpcSimConfig, SimEngine
from smg.sim.engine_core import CoreConfig
from smg.sim.grpc_servicers import STATS_METADATA_KEY, SglangServicer, VllmServicer
from smg.sim.tokenizer_files import load_vocab, qwen3_tokenizer_dir
from smg.tls import H2, ServerTls

__all__ = [
    "EngineStats",
    "GrpcSimConfig",
    "SimEngine",
    "fetch_stats",
    "serve",
    "start_server",
]

REALISTIC = CoreConfig(
    prefill_tokens_per_s=2000.0, decode_ms_per_token=20.0, decode_ms_per_running=0.1,
    kv_capacity_tokens=200_000, max_batch=128,
)  # fmt: skip


# ---------------------------------------------------------------- server, CLI


SERVICE_NAMES = {
    "vllm": "vllm.grpc.engine.VllmEngine",
    "sglang": "sglang.grpc.scheduler.SglangScheduler",
}


async def start_server(
    engine: SimEngine, host: str, port: int, tls: ServerTls | None = None
) -> tuple[Any, HealthServicer, int]:
    """Bind and start a grpc.aio server for `engine`, over TLS with `tls` (mutual TLS when it has
    a client CA); (server, health servicer, bound port)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ]
    )
    runtime = engine.cfg.runtime
    if runtime == "vllm":
        vll_grpc.add_VllmEngineServicer_to_server(VllmServicer(engine), server)
    elif runtime == "sglang":
        sgl_grpc.add_SglangSchedulerServicer_to_server(SglangServicer(engine), server)
    else:
        raise ValueError(f"unknown runtime {runtime!r} (vllm or sglang)")
    health = HealthServicer()
    for name in ("", SERVICE_NAMES[runtime]):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    address = f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        credentials = grpc.ssl_server_credentials(
            [(tls.key_pem, tls.cert_pem)],
            root_certificates=tls.client_ca_pem,
            require_client_auth=tls.client_ca_pem is not None,
        )
        bound = server.add_secure_port(address, credentials)
    await server.start()
    return server, health, bound


async def fetch_stats(channel: Any, runtime: str) -> dict[str, int]:
    """The engine's counters as another process sees them (GetServerInfo trailing metadata)."""
    if runtime == "vllm":
        call = vll_grpc.VllmEngineStub(channel).GetServerInfo(vll.GetServerInfoRequest())
    else:
        call = sgl_grpc.SglangSchedulerStub(channel).GetServerInfo(sgl.GetServerInfoRequest())
    await call
    for key, value in await call.trailing_metadata() or ():
        if key == STATS_METADATA_KEY:
            return dict(json.loads(value))
    raise LookupError(f"no {STATS_METADATA_KEY} metadata: not an smg sim engine?")


async def _stats_http(engine: SimEngine, host: str, port: int) -> Any:
    from aiohttp import web

    async def stats(_request: web.Request) -> web.Response:
        return web.json_response(engine.stats.snapshot())

    app = web.Application()
    app.router.add_get("/sim/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve(cfg: GrpcSimConfig, stop: asyncio.Event) -> None:
    """Run the engine until `stop` is set; prints one ready line."""
    tls = ServerTls.load(cfg.tls_cert_path, cfg.tls_key_path, cfg.tls_client_ca_path, alpn=H2)
    directory = cfg.tokenizer_dir or qwen3_tokenizer_dir()
    vocab = await asyncio.to_thread(load_vocab, directory)
    engine = SimEngine(cfg, vocab)
    server, health, port = await start_server(engine, cfg.host, cfg.port, tls)
    runner = await _stats_http(engine, cfg.host, cfg.stats_port) if cfg.stats_port else None
    scheme = "grpc" if tls is None else "grpcs"
    print(
        f"smg sim (grpc, {cfg.runtime}) listening on {scheme}://{cfg.host}:{port} "
        f"model={cfg.model}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await health.enter_graceful_shutdown()
        await server.stop(grace=1.0)
        if runner is not None:
            await runner.cleanup()
        engine.close()
