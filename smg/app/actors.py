"""The long-lived actors under the core supervisor, and the wiring between them.

Started in order (the core supervisor restarts rest-for-one): the tokenizer registry, the cache
index, the worker registry (its workers live under their own one-for-one supervisor), then, when
configured, the load monitor, the KV-event follower and the idle sweeper. The registry tells
this wiring when a worker leaves or changes state, and the KV-event follower when an engine
reports its load; they are passed on to the actors that care as messages.
"""

from __future__ import annotations

from typing import Any

from smg import errors
from smg.actors.cache_index import CacheIndexActor, ForgetWorker
from smg.actors.idle_sweeper import IdleSweeperActor
from smg.actors.kv_events import KvEventsActor, KvEventsConfig, Unwatch, Watch
from smg.actors.load_monitor import ForgetWorker as ForgetLoad
from smg.actors.load_monitor import LoadMonitorActor, LoadReport, make_fetch, monitoring_enabled
from smg.actors.registry import RegistryActor
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.tokenizers import EnsureTokenizer, TokenizerRegistryActor
from smg.config import GatewayConfig
from smg.core.health import HealthStatus
from smg.core.idle import IdleSweeper
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.metrics import Metrics
from smg.pipeline.backends.grpc import EngineClient
from smg.pipeline.backends.grpc_pool import DispatchProber, EnginePool, GrpcProber, is_grpc_url
from smg.pipeline.backends.http import HttpBackend, HttpProber
from smg.pipeline.kv_index import KvIndexes
from smg.pipeline.loads import LoadBoard, WorkerLoad
from smg.pipeline.policies import CacheAwarePolicy, Policy
from smg.pipeline.tokenizer import Tokenizer

_TOKENIZER_LOAD_TIMEOUT_S = 300.0


class CoreActors:
    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        policy: Policy,
        registry_cell: SnapshotCell[RegistrySnapshot],
        loads: SnapshotCell[LoadBoard],
        kv_indexes: KvIndexes,
        tokenizers: SnapshotCell[dict[str, Tokenizer]],
        engines: EnginePool,
        metrics: Metrics,
        idle: IdleSweeper | None,
    ) -> None:
        self.cfg = cfg
        self.policy = policy
        self.registry_cell = registry_cell
        self.loads = loads
        self.kv_indexes = kv_indexes
        self.tokenizers = tokenizers
        self.engines = engines
        self.metrics = metrics
        self.idle = idle
        self._registry: ActorRef | None = None
        self._cache_index: ActorRef | None = None
        self._tokenizer_registry: ActorRef | None = None
        self._load_monitor: ActorRef | None = None
        self._kv_events: ActorRef | None = None

    @property
    def follows_kv_events(self) -> bool:
        return isinstance(self.policy, CacheAwarePolicy) and not self.cfg.routing.disable_kv_events

    def registry(self) -> ActorRef:
        if self._registry is None:
            raise errors.ApiError(503, "starting", "The gateway is still starting")
        return self._registry

    async def start(self, core: Supervisor, workers: Supervisor, backend: HttpBackend) -> ActorRef:
        """Start every core actor under `core` (workers under `workers`); the registry's ref."""
        cfg = self.cfg
        health = cfg.health
        prober = DispatchProber(
            HttpProber(backend, health.health_check_endpoint, health.health_check_timeout_secs),
            GrpcProber(self.engines, self.ensure_tokenizer, health.health_check_timeout_secs),
        )
        self._tokenizer_registry = await core.start_child(
            ChildSpec("tokenizers", lambda: TokenizerRegistryActor(self.tokenizers, cfg.tokenizer))
        )
        self._cache_index = await core.start_child(
            ChildSpec("cache_index", lambda: CacheIndexActor(self.policy, cfg.routing))
        )
        self._registry = await core.start_child(
            ChildSpec(
                "registry",
                lambda: RegistryActor(
                    cell=self.registry_cell,
                    workers_sup=workers,
                    prober=prober,
                    health_cfg=health,
                    breaker_cfg=cfg.breaker,
                    on_removed=self._on_worker_removed,
                    on_transition=self._on_transition,
                ),
            )
        )
        if monitoring_enabled(cfg.routing):
            fetch = make_fetch(self.engines, backend, timeout_s=health.health_check_timeout_secs)
            self._load_monitor = await core.start_child(
                ChildSpec(
                    "load_monitor",
                    lambda: LoadMonitorActor(
                        cell=self.loads,
                        workers=lambda: self.registry_cell.value.workers,
                        fetch=fetch,
                        interval_s=cfg.routing.load_monitor_interval,
                    ),
                )
            )
        if self.follows_kv_events:
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
            await core.start_child(ChildSpec("idle_sweeper", lambda: IdleSweeperActor(idle)))
        return self._registry

    async def ensure_tokenizer(self, model: str, client: EngineClient) -> Tokenizer:
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
