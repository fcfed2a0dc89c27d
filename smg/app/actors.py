"""The long-lived actors under the core supervisor: what they are given, and the refs the rest of
the gateway keeps.

`smg/actors/system.py` starts them in order (the core supervisor restarts rest-for-one) and holds
the table of who publishes which event on the bus and who subscribes; this module gives them
their transports (health probes, load fetches, KV-event streams) and the tokenizer service the
gRPC probes and the flow ask for.
"""

from __future__ import annotations

from collections.abc import Mapping

from smg import errors
from smg.actors.cache_index import CacheIndex
from smg.actors.event_bus import EventBus
from smg.actors.kv_events import engine_source
from smg.actors.load_monitor import make_fetch
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import Supervisor
from smg.actors.system import ActorDeps, start_actors
from smg.actors.tokenizers import EnsureTokenizer, NoTokenizer
from smg.config import GatewayConfig
from smg.core.idle import IdleSweeper
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.metrics import Metrics
from smg.pipeline.backends.grpc import EngineClient
from smg.pipeline.backends.grpc_pool import DispatchProber, EnginePool, GrpcProber
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.backends.http_probe import HttpProber
from smg.pipeline.backends.provider_probe import ProviderProber
from smg.pipeline.kv_index import KvIndexes
from smg.pipeline.loads import LoadBoard
from smg.pipeline.policies import Policy
from smg.pipeline.tokenizer import Tokenizer

_TOKENIZER_LOAD_TIMEOUT_S = 300.0


class CoreActors:
    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        policy: Policy,
        cache_index: CacheIndex | None,
        events: EventBus,
        registry_cell: SnapshotCell[RegistrySnapshot],
        loads: SnapshotCell[LoadBoard],
        kv_indexes: KvIndexes | None,
        tokenizers: SnapshotCell[dict[str, Tokenizer]],
        engines: EnginePool,
        metrics: Metrics,
        idle: IdleSweeper | None,
    ) -> None:
        self.cfg = cfg
        self.policy = policy
        self.cache_index = cache_index
        self.events = events
        self.registry_cell = registry_cell
        self.loads = loads
        self.kv_indexes = kv_indexes
        self.tokenizers = tokenizers
        self.engines = engines
        self.metrics = metrics
        self.idle = idle
        self._registry: ActorRef | None = None
        self._tokenizer_registry: ActorRef | None = None

    def registry(self) -> ActorRef:
        if self._registry is None:
            raise errors.ApiError(503, "starting", "The gateway is still starting")
        return self._registry

    async def start(self, core: Supervisor, workers: Supervisor, backend: HttpBackend) -> ActorRef:
        """Start every core actor under `core` (workers under `workers`); the registry's ref."""
        cfg = self.cfg
        health = cfg.health
        prober = DispatchProber(
            HttpProber(
                backend,
                health.health_check_endpoint,
                health.health_check_timeout_secs,
                dp_aware=cfg.routing.dp_aware,
            ),
            GrpcProber(
                self.engines,
                self.ensure_tokenizer,
                health.health_check_timeout_secs,
                dp_aware=cfg.routing.dp_aware,
            ),
            ProviderProber(backend, health.health_check_timeout_secs),
        )
        started = await start_actors(
            core,
            workers,
            ActorDeps(
                cfg=cfg,
                events=self.events,
                registry_cell=self.registry_cell,
                prober=prober,
                tokenizers=self.tokenizers,
                cache=self.cache_index,
                policies=(self.policy,),
                loads=self.loads,
                load_fetch=make_fetch(
                    self.engines, backend, timeout_s=health.health_check_timeout_secs
                ),
                kv_indexes=self.kv_indexes,
                kv_source=engine_source(self.engines),
                idle=self.idle,
                transitions=self.metrics,
                release_engine=self.engines.forget,
            ),
        )
        self._tokenizer_registry, self._registry = started.tokenizers, started.registry
        return started.registry

    async def ensure_tokenizer(
        self, model: str, client: EngineClient, labels: Mapping[str, str]
    ) -> Tokenizer | None:
        """The model's tokenizer, loaded by its first worker: from the worker's `tokenizer_path`
        (or `model_path`) and `chat_template` labels, else the launch flags, else the engine.
        None when there is nothing to load and autoload is off (the Rust gateway's worker is
        healthy then; its requests find no tokenizer)."""
        tok = self.tokenizers.value.get(model)
        if tok is not None:
            return tok
        if self._tokenizer_registry is None:
            raise LookupError("the tokenizer registry is not running")
        ask = EnsureTokenizer(
            model,
            client,
            tokenizer_path=labels.get("tokenizer_path") or labels.get("model_path"),
            chat_template=labels.get("chat_template"),
        )
        try:
            result: Tokenizer = await self._tokenizer_registry.ask(ask, _TOKENIZER_LOAD_TIMEOUT_S)
        except NoTokenizer:
            if self.cfg.tokenizer.disable_tokenizer_autoload:
                return None
            raise
        return result
