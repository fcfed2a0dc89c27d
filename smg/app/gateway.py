"""The gateway process: what it is made of, and its lifespan.

`Gateway(cfg)` builds everything the config decides without IO (a refused worker URL, an
unusable certificate or a bad auth flag fails here, before anything starts). `run()` owns the
root of the task tree, in named steps:

1. `check_startup_names`: the command-line workers' host names resolve to allowed addresses;
2. `worker_session`: the HTTP client session to the workers (address policy at every connect);
3. the workers' supervisor and the core supervisor, entered here; `CoreActors.start` starts the
   core actors under them (app/actors.py), then the mesh;
4. `_register_startup_workers`: the command-line workers (and PD roles) join the registry;
5. `_serve`: the request flow and the HTTP application built (`build_flow`, `build_app`), the
   listeners opened, and the process serves until `stop`;
6. `_drain` on stop: new requests get 503 (readiness says "draining"), in-flight requests get
   the grace period, then what is left is cancelled; the mesh is left; the listeners close, then
   the actors stop as their supervisors exit.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random

import structlog
from aiohttp import web

from smg import tracing
from smg.actors.cache_index import CacheTreeCollector, routing_policy
from smg.actors.discovery import DiscoveryMetrics
from smg.actors.event_bus import EventBus
from smg.actors.supervisor import Strategy, Supervisor
from smg.actors.tokenizers import check_tokenizer_flags
from smg.api.admin_routes import AdminRoutes
from smg.api.auth import AuthGate
from smg.api.connection_guard import ConnectionGuard
from smg.api.conversations_routes import ConversationsRoutes
from smg.api.edge_routes import EdgeRoutes
from smg.api.engine_metrics import EngineMetrics
from smg.api.listeners import open_file_limit
from smg.api.messages_routes import MessagesRoutes
from smg.api.middleware import edge_middleware, metrics_middleware, refuse_while_draining
from smg.api.native_routes import NativeRoutes
from smg.api.openai_routes import OpenAIRoutes
from smg.api.responses_background import Background
from smg.api.responses_loop import ToolLoop
from smg.api.responses_routes import ResponsesRoutes
from smg.api.scoring_routes import ScoringRoutes
from smg.app.actors import CoreActors
from smg.app.discovery import start_discovery, with_discovery
from smg.app.edge_listener import Listeners, first_checks
from smg.app.flow import build_flow
from smg.app.mesh import GatewayMesh
from smg.app.metered_storage import metered
from smg.app.outbound import (
    address_guard,
    check_startup_names,
    data_client,
    http_backend,
    idle_sweeper,
    startup_workers,
    worker_session,
)
from smg.clock import Clock, LoopClock
from smg.config import (
    ConfigError,
    GatewayConfig,
    McpConfig,
    check_health,
    check_limits,
    check_storage,
    duration_buckets,
    effective_max_concurrency,
    effective_max_connections,
    load_mcp_config,
    model_aliases,
)
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.flow.admission import Admission
from smg.flow.inflight import InFlight
from smg.flow.serve import Flow
from smg.mcp_client.pool import McpPool, check_mcp_servers
from smg.metrics import Metrics
from smg.metrics.workers import EngineLoadCollector, PolicyCollector
from smg.pipeline.backends.flush import CacheFlusher
from smg.pipeline.backends.grpc_pool import EnginePool
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.kv_index import KvIndexes
from smg.pipeline.loads import LoadBoard
from smg.pipeline.policies import CacheAwarePolicy
from smg.pipeline.tokenizer import Tokenizer
from smg.storage import Storage, StorageError
from smg.storage.factory import open_storage
from smg.tls import GatewayTls

log = structlog.get_logger("smg.gateway")

_FLUSH_WORKER_TIMEOUT_S = 10.0  # one worker's /flush_cache (the fan-out has its own limit)


class Gateway:
    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        reuse_port: bool = False,
    ) -> None:
        cfg = with_discovery(cfg)  # a bad discovery flag fails here; discovery turns IGW on
        self.cfg = cfg
        self.reuse_port = reuse_port  # one of `--workers N` processes: the port is shared
        # a malformed --prefill entry or a worker URL the address policy refuses fails here,
        # before anything starts (host names are resolved and checked at the start of `run`)
        self.url_guard = address_guard(cfg)
        self.idle = idle_sweeper(cfg)
        self.tls = GatewayTls.load(cfg.tls)  # so does an unusable certificate
        check_limits(cfg.limits)
        check_health(cfg.health)  # the start-up timeout and check interval above zero
        check_storage(cfg.storage)  # e.g. --history-backend postgres without --postgres-db-url
        model_aliases(cfg.routing.model_alias)  # a malformed --model-alias
        check_tokenizer_flags(cfg.tokenizer)  # --tokenizer-path naming a folder or id not here
        # an unreadable or malformed MCP servers file stops the start
        path = cfg.mcp.mcp_config_path
        self.mcp_config: McpConfig = load_mcp_config(path) if path else McpConfig()
        if cfg.mcp.mcp_max_iterations < 1:
            raise ConfigError("--mcp-max-iterations must be at least 1")
        self.clock: Clock = clock or LoopClock()
        self.auth = AuthGate.from_config(cfg, self.clock.now)  # a bad auth flag fails here too
        self.rng = rng or random.Random()
        self.registry_cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
        self.inflight = InFlight()
        adm = cfg.admission
        self.admission = Admission(
            effective_max_concurrency(adm, os.cpu_count() or 1),
            adm.queue_size,
            adm.queue_timeout_secs,
            self.clock,
        )
        self.guard = ConnectionGuard(
            cfg.limits,
            max_connections=effective_max_connections(cfg.limits, open_file_limit()),
            budget_timeout_s=adm.queue_timeout_secs,
            clock=self.clock,
        )
        self.loads: SnapshotCell[LoadBoard] = SnapshotCell(LoadBoard())
        # background responses: run while serving (_serve)
        self.background = Background(max(1, cfg.storage.max_background_responses))
        self.background_mode = cfg.storage.max_background_responses > 0  # 0: run in foreground
        self.events = EventBus()  # worker lifecycle and mesh imports, between the actors
        # other routers share the workers (mesh nodes, `--workers N` siblings): place a new
        # prefix where they all would (rendezvous hashing), not by this process's own tree
        self.policy, self.cache_index = routing_policy(
            cfg.routing, self.rng, self.clock.now, self.loads, hash_misses=cfg.mesh.enable_mesh
        )
        self.kv_indexes: KvIndexes | None = None  # followed from the engines' KV events
        if isinstance(self.policy, CacheAwarePolicy) and not cfg.routing.disable_kv_events:
            self.kv_indexes = self.policy.kv_index = KvIndexes()
        self.tokenizers: SnapshotCell[dict[str, Tokenizer]] = SnapshotCell({})
        self.engines = EnginePool(
            rpc_timeout_s=cfg.health.health_check_timeout_secs,
            tls=self.tls.workers,
            address_guard=self.url_guard,
            idle=self.idle,
            max_response_bytes=cfg.upstream.max_upstream_response_bytes,
        )
        self.metrics = Metrics(
            lambda: self.registry_cell.value,
            lambda: self.admission,
            cfg.routing.policy,
            lambda: self.tokenizers.value,
            buckets=duration_buckets(cfg.observability),
            inflight_ages=lambda: self.inflight.ages(self.clock.now()),
        )
        self.actors = CoreActors(
            cfg,
            policy=self.policy,
            cache_index=self.cache_index,
            events=self.events,
            registry_cell=self.registry_cell,
            loads=self.loads,
            kv_indexes=self.kv_indexes,
            tokenizers=self.tokenizers,
            engines=self.engines,
            metrics=self.metrics,
            idle=self.idle,
        )
        self.mesh = GatewayMesh(cfg, self.clock, self.rng)
        if self.cache_index is not None:
            self.mesh.cache_state = self.cache_index.state
            self.metrics.registry.register(CacheTreeCollector(self.cache_index))
        if self.mesh.enabled:
            self.metrics.registry.register(self.mesh.collector())
        self.metrics.registry.register(self.guard.collector())
        self.discovery_metrics = DiscoveryMetrics(self.metrics.registry)
        self.metrics.registry.register(
            EngineLoadCollector(lambda: self.registry_cell.value, lambda: self.loads.value)
        )
        self.metrics.registry.register(
            PolicyCollector(lambda: [self.policy], lambda: self.registry_cell.value)
        )
        self.worker_http: HttpBackend | None = None  # while running: the workers' HTTP client
        self.bound_port: int | None = None
        self.bound_metrics_port: int | None = None
        self.started = asyncio.Event()

    # --- the HTTP application --------------------------------------------------------------------
    def build_flow(self, backend: HttpBackend) -> Flow:
        return build_flow(
            self.cfg,
            backend=backend,
            engines=self.engines,
            registry=self.registry_cell,
            tokenizers=self.tokenizers,
            loads=self.loads,
            policy=self.policy,
            admission=self.admission,
            inflight=self.inflight,
            metrics=self.metrics,
            clock=self.clock,
            rng=self.rng,
            router_metrics=self.metrics.router,
        )

    def build_app(self, flow: Flow, history: Storage, mcp: McpPool) -> web.Application:
        srv = self.cfg.server
        app = web.Application(
            client_max_size=srv.max_payload_size,
            middlewares=[
                edge_middleware(self.auth, self.metrics),
                refuse_while_draining(self.admission),
                *self.mesh.middlewares(),
            ],
            handler_args=None,
        )
        self.auth.install(app)
        OpenAIRoutes(flow=flow, max_payload=srv.max_payload_size).install(app)
        NativeRoutes(flow=flow, max_payload=srv.max_payload_size).install(app)
        MessagesRoutes(flow=flow, max_payload=srv.max_payload_size).install(app)
        ScoringRoutes(flow=flow, max_payload=srv.max_payload_size).install(app)
        tools = ToolLoop(
            pool=mcp,
            metrics=self.metrics,
            max_iterations=self.cfg.mcp.mcp_max_iterations,
            guard=self.url_guard,
        )
        ResponsesRoutes(
            flow=flow,
            storage=history,
            max_payload=srv.max_payload_size,
            tools=tools,
            background=self.background if self.background_mode else None,
        ).install(app)
        ConversationsRoutes(storage=history, max_payload=srv.max_payload_size).install(app)
        AdminRoutes(
            registry_cell=self.registry_cell,
            registry=self.actors.registry,
            admission=self.admission,
            max_payload=srv.max_payload_size,
            url_guard=self.url_guard,
            pd_mode=self.cfg.pd.pd_disaggregation,
            igw=self.cfg.routing.enable_igw,
            flusher=CacheFlusher(self.worker_http, self.engines, _FLUSH_WORKER_TIMEOUT_S),
        ).install(app)
        EngineMetrics(
            self.registry_cell,
            lambda: None if self.worker_http is None else self.worker_http.scrape,
            self.cfg.health.health_check_timeout_secs,
        ).install(app)
        self.mesh.install(app)
        return app

    # --- lifespan --------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await check_startup_names(self.cfg, self.url_guard)
        await check_mcp_servers(self.mcp_config, self.clock)  # a required one down stops the start
        history = await self._open_history()
        obs = self.cfg.observability
        if obs.enable_trace:
            tracing.start(obs.otlp_traces_endpoint)
        try:
            await self._run(history, stop)
        finally:
            await history.close()
            if obs.enable_trace:  # the last spans' flush, bounded by the export timeout
                await asyncio.to_thread(tracing.stop)
        self.events.close()
        log.info("gateway_stopped")

    async def preflight(self) -> None:
        """What `run` checks first (worker names, required MCP servers, the history backend),
        without serving: a `--workers N` parent runs it once, so a bad start is one line."""
        await check_startup_names(self.cfg, self.url_guard)
        await check_mcp_servers(self.mcp_config, self.clock)
        history = await self._open_history()
        await history.close()

    async def _open_history(self) -> Storage:
        """The stored responses and conversations (`--history-backend`), connected and migrated;
        a backend that cannot be opened stops the start with one line (no URL in it)."""
        try:
            return metered(await open_storage(self.cfg.storage), self.metrics, self.clock.now)
        except StorageError as err:
            name = self.cfg.storage.history_backend
            raise ConfigError(f"--history-backend {name}: {err}") from None

    async def _run(self, history: Storage, stop: asyncio.Event) -> None:
        tls, guard = self.tls.workers.http, self.url_guard
        async with worker_session(tls, guard) as session, data_client(tls, guard) as client:
            backend = self.worker_http = http_backend(session, self.cfg, self.idle, client)
            async with (
                Supervisor("workers", strategy=Strategy.ONE_FOR_ONE, clock=self.clock) as wsup,
                Supervisor("core", strategy=Strategy.REST_FOR_ONE, clock=self.clock) as core,
            ):
                registry = await self.actors.start(core, wsup, backend)
                await self.mesh.start(core, registry, self.registry_cell, self.events)
                await self._register_startup_workers()
                await start_discovery(
                    self.cfg,
                    core,
                    registry,
                    self.registry_cell,
                    self.discovery_metrics,
                    self.rng,
                    self.url_guard,
                    session,
                    join=self.mesh.add_seeds if self.mesh.enabled else None,
                )
                try:
                    # the MCP servers' sessions (opened on first use) live as long as serving
                    async with McpPool(self.mcp_config, clock=self.clock) as mcp:
                        self.metrics.mcp_servers.set_function(
                            lambda: len(mcp.open_servers) + mcp.request_sessions
                        )
                        await self._serve(self.build_flow(backend), history, mcp, stop)
                finally:
                    await self.engines.close()

    async def _register_startup_workers(self) -> None:
        registry = self.actors.registry()
        for msg in startup_workers(self.cfg):
            await registry.ask(msg, 10.0)  # the mesh hears of it as an event

    async def _serve(self, flow: Flow, history: Storage, mcp: McpPool, stop: asyncio.Event) -> None:
        listeners = Listeners(self.cfg, self.guard, tls=self.tls.server, reuse_port=self.reuse_port)
        await listeners.setup(self.build_app(flow, history, mcp), self._edge_routes(flow))
        try:
            if self.reuse_port:
                await first_checks(self.registry_cell, self.clock)
            # /metrics: a control-plane credential, any role
            await listeners.listen(self.metrics.render, [metrics_middleware(self.auth)])
            self.bound_port, self.bound_metrics_port = listeners.port, listeners.metrics_port
            self.started.set()
            # Everything built at start-up lives as long as the process: keep it out of the
            # collector's generations so the per-request garbage is all it scans.
            gc.collect()
            gc.freeze()
            async with self.background.serving(), asyncio.TaskGroup() as tg:
                sweeper = tg.create_task(self.guard.run(), name="connection-sweeper")
                try:
                    await stop.wait()
                    await self._drain()
                    await self.mesh.leave()
                finally:
                    sweeper.cancel()
        finally:
            await listeners.close()

    def _edge_routes(self, flow: Flow) -> EdgeRoutes:
        return EdgeRoutes(
            flow=flow,
            gate=self.auth,
            metrics=self.metrics,
            admission=self.admission,
            guard=self.guard,
            max_payload=self.cfg.server.max_payload_size,
            rate_check=self.mesh.rate_check(),
        )

    async def _drain(self) -> None:
        # new requests get 503 shutting_down, readiness says "draining", and so do queued ones
        self.admission.close()
        grace = self.cfg.server.shutdown_grace_period_secs
        log.info("gateway_draining", in_flight=len(self.inflight), grace_s=grace)
        try:
            await asyncio.wait_for(self.inflight.wait_empty(), grace)
        except TimeoutError:
            n = self.inflight.cancel_all("shutdown grace period over")
            log.warning("gateway_drain_timeout", cancelled=n)
            await asyncio.sleep(0)
