"""The gateway process: composition root and lifespan.

`Gateway.run()` owns the root of the task tree: the workers' supervisor and the core supervisor
(registry, cache index) are entered here, and the HTTP listeners live inside them. Shutdown is
ordered: stop accepting new work as ready (readiness answers 503 "draining"), let in-flight
requests finish within the grace period, cancel what is left, then stop the actors.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from smg import errors
from smg.actors.cache_index import CacheIndexActor, CacheTreeCollector, ForgetWorker
from smg.actors.idle_sweeper import IdleSweeperActor
from smg.actors.kv_events import KvEventsActor, KvEventsConfig, Unwatch, Watch
from smg.actors.load_monitor import ForgetWorker as ForgetLoad
from smg.actors.load_monitor import LoadMonitorActor, LoadReport, make_fetch, monitoring_enabled
from smg.actors.registry import RegistryActor
from smg.actors.request import InFlight
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Strategy, Supervisor
from smg.actors.tokenizers import EnsureTokenizer, TokenizerRegistryActor
from smg.api.admin_routes import AdminRoutes
from smg.api.admission import Admission, refuse_while_draining
from smg.api.auth import AuthGate
from smg.api.connection_guard import ConnectionGuard
from smg.api.listeners import bound_port, open_file_limit, start_metrics, start_site
from smg.api.mesh_setup import GatewayMesh
from smg.api.middleware import edge_middleware, metrics_middleware
from smg.api.native_routes import NativeRoutes
from smg.api.openai_routes import OpenAIRoutes
from smg.api.pd_grpc import GrpcPd
from smg.api.pd_routes import PdRoutes
from smg.api.pipeline_routes import PipelineRoutes
from smg.api.relay import HttpRelay
from smg.api.upstream import (
    address_guard,
    check_startup_names,
    http_backend,
    idle_sweeper,
    startup_workers,
)
from smg.clock import Clock, LoopClock
from smg.config import (
    GatewayConfig,
    check_limits,
    effective_max_concurrency,
    effective_max_connections,
)
from smg.core.health import HealthStatus
from smg.core.retry import RetryPolicy
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.metrics import Metrics
from smg.pipeline.backends.grpc import EngineClient
from smg.pipeline.backends.grpc_pool import DispatchProber, EnginePool, GrpcProber, is_grpc_url
from smg.pipeline.backends.http import HttpBackend, HttpProber
from smg.pipeline.kv_index import KvIndexes
from smg.pipeline.loads import LoadBoard, WorkerLoad
from smg.pipeline.parser_choice import ParserChoice
from smg.pipeline.policies import CacheAwarePolicy, Policy, make_policy
from smg.pipeline.runner import Runner
from smg.pipeline.tokenizer import Tokenizer
from smg.tls import GatewayTls

log = structlog.get_logger("smg.gateway")

_TEXT_POLICIES = frozenset({"cache_aware", "consistent_hashing", "prefix_hash", "bucket"})
_TOKENIZER_LOAD_TIMEOUT_S = 300.0
# After answering without reading a body (413, 401, 503...), aiohttp reads and drops what the
# client still sends for this long, so the client sees the answer instead of a reset; short, as
# a sender of an endless body holds its connection (and our CPU) that long.
_LINGER_S = 2.0


class Gateway:
    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        # a malformed --prefill entry or a worker URL the address policy refuses fails here,
        # before anything starts (host names are resolved and checked at the start of `run`)
        self.url_guard = address_guard(cfg)
        self.idle = idle_sweeper(cfg)
        self.tls = GatewayTls.load(cfg.tls)  # so does an unusable certificate
        check_limits(cfg.limits)
        self.clock: Clock = clock or LoopClock()
        self.auth = AuthGate.from_config(cfg, self.clock.now)  # a bad auth flag fails here too
        self.rng = rng or random.Random()
        self.draining = False
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
        self.policy = make_policy(
            cfg.routing.policy, cfg.routing, self.rng, self.clock.now, loads=self.loads
        )
        self._load_monitor: ActorRef | None = None
        self._kv_events: ActorRef | None = None
        self.kv_indexes = KvIndexes()
        if isinstance(self.policy, CacheAwarePolicy) and not cfg.routing.disable_kv_events:
            self.policy.kv_index = self.kv_indexes
        self._registry: ActorRef | None = None
        self._cache_index: ActorRef | None = None
        self._tokenizer_registry: ActorRef | None = None
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
        )
        self.mesh = GatewayMesh(cfg, self.clock, self.rng)
        if isinstance(self.policy, CacheAwarePolicy):
            self.mesh.cache_state = self.policy.state
            self.metrics.registry.register(CacheTreeCollector(self.policy.state))
        if self.mesh.enabled:
            self.metrics.registry.register(self.mesh.collector())
        self.metrics.registry.register(self.guard.collector())
        self.bound_port: int | None = None
        self.bound_metrics_port: int | None = None
        self.started = asyncio.Event()

    # --- the HTTP application --------------------------------------------------------------------
    def registry(self) -> ActorRef:
        if self._registry is None:
            raise errors.ApiError(503, "starting", "The gateway is still starting")
        return self._registry

    def build_app(self, runner: Runner, backend: HttpBackend) -> web.Application:
        srv = self.cfg.server
        app = web.Application(
            client_max_size=srv.max_payload_size,
            middlewares=[
                edge_middleware(self.auth, self.metrics),
                refuse_while_draining(lambda: self.draining),
                *self.mesh.middlewares(),
            ],
            handler_args=None,
        )
        self.auth.install(app)
        relay = HttpRelay(runner, backend)
        pd_routes = self._pd_routes(runner, backend)
        pipeline = PipelineRoutes(
            runner=runner,
            engines=self.engines,
            tokenizers=self.tokenizers,
            relay=relay,
            request_timeout_s=srv.request_timeout_secs,
            parsers=ParserChoice(
                self.cfg.tokenizer.reasoning_parser, self.cfg.tokenizer.tool_call_parser
            ),
            pd=None
            if pd_routes is None
            else GrpcPd(
                routes=pd_routes,
                engines=self.engines,
                timeout_s=srv.request_timeout_secs,
                prefill_retries=0 if self.cfg.retry.disable_retries else 1,
            ),
        )
        openai = OpenAIRoutes(
            runner=runner,
            relay=relay,
            pipeline=pipeline,
            admission=self.admission,
            inflight=self.inflight,
            max_payload=srv.max_payload_size,
            wants_text=bool(self._text_policies() & _TEXT_POLICIES),
            pd=pd_routes,
        )
        openai.install(app)
        NativeRoutes(
            openai=openai,
            pipeline=pipeline,
            admission=self.admission,
            inflight=self.inflight,
            max_payload=srv.max_payload_size,
        ).install(app)
        AdminRoutes(
            registry_cell=self.registry_cell,
            registry=self.registry,
            is_draining=lambda: self.draining,
            max_payload=srv.max_payload_size,
            url_guard=self.url_guard,
            pd_mode=self.cfg.pd.pd_disaggregation,
            on_added=self.mesh.announce_add,
            on_removed=self.mesh.announce_remove,
        ).install(app)
        self.mesh.install(app)
        return app

    def _text_policies(self) -> set[str]:
        pdc, name = self.cfg.pd, self.cfg.routing.policy
        if not pdc.pd_disaggregation:
            return {name}
        return {pdc.prefill_policy or name, pdc.decode_policy or name}

    def _pd_routes(self, runner: Runner, backend: HttpBackend) -> PdRoutes | None:
        pdc = self.cfg.pd
        if not pdc.pd_disaggregation:
            return None

        def policy(name: str | None) -> Policy:
            chosen = name or self.cfg.routing.policy
            if chosen == self.cfg.routing.policy and isinstance(self.policy, CacheAwarePolicy):
                return self.policy  # share its state (cache-aware trees, KV index)
            # One instance per role otherwise: a round-robin counter shared by both roles moves
            # twice per request, so with two prefills and one decode every request would land on
            # the same prefill.
            return make_policy(chosen, self.cfg.routing, self.rng, self.clock.now, loads=self.loads)

        return PdRoutes(
            backend=backend,
            prefill_policy=policy(pdc.prefill_policy),
            decode_policy=policy(pdc.decode_policy),
            clock=self.clock,
            rng=self.rng,
            metrics=self.metrics,
        )

    # --- lifespan --------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.cfg
        await check_startup_names(cfg, self.url_guard)
        connector = aiohttp.TCPConnector(
            limit=0,
            ttl_dns_cache=300,
            force_close=False,
            ssl=self.tls.workers.http,
            socket_factory=self.url_guard.socket_factory,  # every connect: the address policy
        )
        async with aiohttp.ClientSession(
            connector=connector,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            auto_decompress=False,
        ) as session:
            backend = http_backend(session, cfg, self.idle)
            prober = DispatchProber(
                HttpProber(
                    backend, cfg.health.health_check_endpoint, cfg.health.health_check_timeout_secs
                ),
                GrpcProber(
                    self.engines, self._ensure_tokenizer, cfg.health.health_check_timeout_secs
                ),
            )
            runner = Runner(
                registry=self.registry_cell,
                policy=self.policy,
                retry=RetryPolicy.from_config(cfg.retry),
                clock=self.clock,
                rng=self.rng,
                metrics=self.metrics,
                request_timeout_s=cfg.server.request_timeout_secs,
            )
            async with (
                Supervisor("workers", strategy=Strategy.ONE_FOR_ONE, clock=self.clock) as wsup,
                Supervisor("core", strategy=Strategy.REST_FOR_ONE, clock=self.clock) as core,
            ):
                self._tokenizer_registry = await core.start_child(
                    ChildSpec(
                        "tokenizers",
                        lambda: TokenizerRegistryActor(self.tokenizers, cfg.tokenizer),
                    )
                )
                self._cache_index = await core.start_child(
                    ChildSpec(
                        "cache_index",
                        lambda: CacheIndexActor(self.policy, cfg.routing),
                    )
                )
                self._registry = await core.start_child(
                    ChildSpec(
                        "registry",
                        lambda: RegistryActor(
                            cell=self.registry_cell,
                            workers_sup=wsup,
                            prober=prober,
                            health_cfg=cfg.health,
                            breaker_cfg=cfg.breaker,
                            on_removed=self._on_worker_removed,
                            on_transition=self._on_transition,
                        ),
                    )
                )
                if monitoring_enabled(cfg.routing):
                    self._load_monitor = await core.start_child(
                        ChildSpec(
                            "load_monitor",
                            lambda: LoadMonitorActor(
                                cell=self.loads,
                                workers=lambda: self.registry_cell.value.workers,
                                fetch=make_fetch(
                                    self.engines,
                                    backend,
                                    timeout_s=cfg.health.health_check_timeout_secs,
                                ),
                                interval_s=cfg.routing.load_monitor_interval,
                            ),
                        )
                    )
                if isinstance(self.policy, CacheAwarePolicy) and not cfg.routing.disable_kv_events:
                    self._kv_events = await core.start_child(
                        ChildSpec(
                            "kv_events",
                            lambda: KvEventsActor(
                                KvEventsConfig(), indexes=self.kv_indexes, on_load=self._on_kv_load
                            ),
                        )
                    )
                if self.idle is not None:
                    idle = self.idle
                    await core.start_child(
                        ChildSpec("idle_sweeper", lambda: IdleSweeperActor(idle))
                    )
                await self.mesh.start(core, self._registry, self.registry_cell)
                for msg in startup_workers(cfg):
                    self.mesh.announce_add(msg, await self._registry.ask(msg, 10.0))
                try:
                    await self._serve(runner, backend, stop)
                finally:
                    await self.engines.close()
        log.info("gateway_stopped")

    async def _serve(self, runner: Runner, backend: HttpBackend, stop: asyncio.Event) -> None:
        cfg = self.cfg
        app = self.build_app(runner, backend)
        web_runner = web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=True,
            keepalive_timeout=cfg.limits.keepalive_timeout_secs,
            lingering_time=_LINGER_S,
        )
        await web_runner.setup()
        assert web_runner.server is not None
        site = await start_site(
            web_runner,
            cfg.server.host,
            cfg.server.port,
            protocol_factory=self.guard.factory(web_runner.server),
            handshake_timeout_s=cfg.limits.header_timeout_secs or None,
            ssl_context=self.tls.server,
        )
        self.bound_port = bound_port(site)
        gate = [metrics_middleware(self.auth)]  # /metrics: a control-plane credential, any role
        metrics = await start_metrics(
            cfg.observability,
            cfg.server.host,
            self.metrics.render,
            gate,
            ssl_context=self.tls.server,
        )
        metrics_runner = None
        if metrics is not None:
            metrics_runner, self.bound_metrics_port = metrics
        log.info(
            "gateway_listening",
            host=cfg.server.host,
            port=self.bound_port,
            tls=self.tls.server is not None,
            metrics_port=self.bound_metrics_port,
            policy=cfg.routing.policy,
            workers=len(cfg.workers.worker_urls),
            max_connections=self.guard.max_connections,
        )
        self.started.set()
        # Everything built at start-up lives as long as the process: keep it out of the
        # collector's generations so the per-request garbage is all it scans.
        gc.collect()
        gc.freeze()
        try:
            async with asyncio.TaskGroup() as tg:
                sweeper = tg.create_task(self.guard.run(), name="connection-sweeper")
                try:
                    await stop.wait()
                    await self._drain()
                    await self.mesh.leave()
                finally:
                    sweeper.cancel()
        finally:
            await web_runner.cleanup()
            if metrics_runner is not None:
                await metrics_runner.cleanup()

    async def _drain(self) -> None:
        self.draining = True  # new requests get 503 shutting_down, readiness says "draining"
        self.admission.close()  # and so do the queued ones
        grace = self.cfg.server.shutdown_grace_period_secs
        log.info("gateway_draining", in_flight=len(self.inflight), grace_s=grace)
        try:
            await asyncio.wait_for(self.inflight.wait_empty(), grace)
        except TimeoutError:
            n = self.inflight.cancel_all("shutdown grace period over")
            log.warning("gateway_drain_timeout", cancelled=n)
            await asyncio.sleep(0)

    async def _ensure_tokenizer(self, model: str, client: EngineClient) -> Tokenizer:
        tok = self.tokenizers.value.get(model)
        if tok is not None:
            return tok
        if self._tokenizer_registry is None:
            raise LookupError("the tokenizer registry is not running")
        result: Tokenizer = await self._tokenizer_registry.ask(
            EnsureTokenizer(model, client), _TOKENIZER_LOAD_TIMEOUT_S
        )
        return result

    def _on_worker_removed(self, snap: WorkerSnapshot) -> None:
        if self._cache_index is not None and self._cache_index.alive:
            self._cache_index.tell(ForgetWorker(snap.worker_id))
        if self._load_monitor is not None and self._load_monitor.alive:
            self._load_monitor.tell(ForgetLoad(snap.worker_id))
        if self._kv_events is not None and self._kv_events.alive:
            self._kv_events.tell(Unwatch(snap.worker_id))

    def _on_transition(self, snap: WorkerSnapshot, kind: str, value: Any) -> None:
        to = getattr(value, "value", None) if kind == "health" else getattr(value, "name", "")
        self.metrics.transition(snap.url, kind, str(to).lower())
        if (
            kind == "health"
            and value is HealthStatus.READY
            and self._kv_events is not None
            and snap.model_id is not None
            and is_grpc_url(snap.url)
        ):
            # A worker that (re)became ready: follow its KV events (re-watching replaces the
            # stream; the index rebuilds from the engine's replay).
            client = self.engines.client(snap.url)
            self._kv_events.tell(Watch(snap.worker_id, snap.model_id, client.subscribe_kv_events))

    def _on_kv_load(self, worker_id: str, load: Any) -> None:
        if self._load_monitor is not None and self._load_monitor.alive:
            self._load_monitor.tell(LoadReport(worker_id, WorkerLoad.from_engine_load(load)))
