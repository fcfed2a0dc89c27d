"""The simulated OpenAI-compatible worker (`smg sim`): an aiohttp app that answers the way vLLM and
SGLang servers do, so a gateway can register, probe, load-balance and stream from it.

The handlers live in `http_handlers.SimWorker` (generation) and the `http_admin.SimAdmin` it
extends (state, discovery, health, control); this module wires them to routes and runs the
server (`build_app`, `start`, and `serve`, which `smg sim` runs until a signal).
"""

from __future__ import annotations

import asyncio
import ssl

from aiohttp import web

from smg.config import SimConfig
from smg.sim.http_handlers import SimWorker, Sleep
from smg.tls import ServerTls

WORKER_KEY = web.AppKey("smg_sim_worker", SimWorker)


def build_app(cfg: SimConfig, *, clock_sleep: Sleep = asyncio.sleep) -> web.Application:
    worker = SimWorker(cfg, clock_sleep)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[WORKER_KEY] = worker
    add = app.router.add_route
    add("POST", "/v1/chat/completions", worker.chat)
    add("POST", "/v1/completions", worker.completions)
    add("POST", "/v1/embeddings", worker.embeddings)
    add("POST", "/v1/rerank", worker.rerank)
    add("POST", "/v1/classify", worker.classify)
    add("POST", "/generate", worker.generate)
    add("GET", "/health", worker.health)
    add("GET", "/health_generate", worker.health)
    add("GET", "/v1/models", worker.models)
    add("GET", "/version", worker.version)
    add("GET", "/get_server_info", worker.server_info)
    add("GET", "/server_info", worker.server_info)
    add("GET", "/get_model_info", worker.model_info)
    add("GET", "/get_load", worker.get_load)
    add("GET", "/metrics", worker.metrics)
    add("POST", "/flush_cache", worker.flush_cache)
    add("POST", "/sim/health", worker.set_health)
    add("POST", "/sim/config", worker.set_config)
    add("GET", "/sim/config", worker.get_config)
    add("GET", "/sim/stats", worker.get_stats)
    return app


def worker_of(app: web.Application) -> SimWorker:
    """The in-process worker behind an app from `build_app` (for tests and dev mode)."""
    return app[WORKER_KEY]


async def start(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Listen on (host, port), over TLS with `ssl_context`; port 0 picks a free one. Returns the
    runner and the bound port.

    Handlers are cancelled when their client disconnects, so a stream waiting out its first-token
    delay stops at once. The caller owns the runner and must `await runner.cleanup()`.
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=4096, ssl_context=ssl_context)
        await site.start()
    except Exception:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


async def serve(cfg: SimConfig) -> None:
    """Run the worker until cancelled; HTTPS with `--tls-cert-path`/`--tls-key-path`, mutual TLS
    with `--tls-client-ca-path`."""
    tls = ServerTls.load(cfg.tls_cert_path, cfg.tls_key_path, cfg.tls_client_ca_path)
    runner, port = await start(
        build_app(cfg), cfg.host, cfg.port, None if tls is None else tls.context
    )
    try:
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        scheme = "http" if tls is None else "https"
        print(f"smg sim listening on {scheme}://{host}:{port} model={cfg.model}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
