"""The gateway's long-lived actors, started in order under the core supervisor, and how their
events flow. The composition root builds `ActorDeps` and calls `start_actors` once.

Who publishes and who subscribes (every event through the `EventBus`; no callbacks between
actors):

| event                                       | published by   | subscribers (delivery)            |
|---------------------------------------------|----------------|-----------------------------------|
| WorkerAdded, WorkerRemoved                  | registry       | mesh sync (resync); removed also: |
|                                             |                | cache index (resync), load        |
|                                             |                | monitor (drop), KV events (resync)|
| WorkerUpdated (PATCH / PUT)                 | registry       | mesh sync (resync)                |
| WorkerHealthChanged                         | registry       | KV events (resync), metrics (drop)|
| WorkerBreakerChanged                        | registry       | metrics (drop)                    |
| WorkerModelChanged                          | registry       | none yet (the vocabulary is whole)|
| EngineLoadReported                          | KV events      | load monitor (drop)               |
| MeshDocumentsChanged                        | mesh node      | mesh sync (resync)                |
| CacheHintsImported                          | mesh sync      | cache index (resync)              |

`resync` subscribers rebuild what they derive from the registry's snapshot when the bus had to
drop events for them; `drop` ones lose nothing that matters (the next tick, push or document
carries the news). The core supervisor is rest_for_one: an actor that crashes is restarted with
the ones started after it, which depend on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from smg.actors.cache_index import CacheIndex, CacheIndexActor
from smg.actors.event_bus import EventBus
from smg.actors.idle_sweeper import IdleSweeperActor
from smg.actors.kv_events import KvEventsActor, KvEventsConfig, WatchSource
from smg.actors.load_monitor import LoadFetch, LoadMonitorActor, monitoring_enabled
from smg.actors.registry import RegistryActor
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.tokenizers import TokenizerRegistryActor
from smg.actors.worker import Prober
from smg.actors.worker_metrics import TransitionMetricsActor, TransitionSink
from smg.config import GatewayConfig
from smg.core.idle import IdleSweeper
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.pipeline.kv_index import KvIndexes
from smg.pipeline.loads import LoadBoard
from smg.pipeline.policies.base import Policy
from smg.pipeline.tokenizer import Tokenizer


@dataclass(frozen=True, slots=True)
class ActorDeps:
    cfg: GatewayConfig
    events: EventBus
    registry_cell: SnapshotCell[RegistrySnapshot]
    prober: Prober  # health checks
    tokenizers: SnapshotCell[dict[str, Tokenizer]]
    cache: CacheIndex | None  # the cache-aware state, when the policy is cache-aware
    policies: Sequence[Policy]  # other routing state to forget removed workers in
    loads: SnapshotCell[LoadBoard]
    load_fetch: LoadFetch
    kv_indexes: KvIndexes | None  # None: no KV events followed
    kv_source: WatchSource
    idle: IdleSweeper | None
    transitions: TransitionSink  # smg_worker_transitions_total
    # closes an engine's connection once its last worker is removed (EnginePool.forget)
    release_engine: Callable[[str], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True)
class CoreActors:
    tokenizers: ActorRef
    cache_index: ActorRef
    registry: ActorRef
    load_monitor: ActorRef | None
    kv_events: ActorRef | None


async def start_actors(core: Supervisor, workers: Supervisor, deps: ActorDeps) -> CoreActors:
    """Start the core actors (each subscribes itself); worker actors go under `workers`."""
    cfg, events = deps.cfg, deps.events
    tokenizers = await core.start_child(
        ChildSpec("tokenizers", lambda: TokenizerRegistryActor(deps.tokenizers, cfg.tokenizer))
    )
    cache_index = await core.start_child(
        ChildSpec(
            "cache_index",
            lambda: CacheIndexActor(
                cfg.routing,
                index=deps.cache,
                forget=deps.policies,
                registry=deps.registry_cell,
                events=events,
            ),
        )
    )
    registry = await core.start_child(
        ChildSpec(
            "registry",
            lambda: RegistryActor(
                cell=deps.registry_cell,
                workers_sup=workers,
                prober=deps.prober,
                health_cfg=cfg.health,
                breaker_cfg=cfg.breaker,
                events=events,
                dp_aware=cfg.routing.dp_aware,
                release_engine=deps.release_engine,
                # a removed engine's last requests run out their deadline on its connection
                release_grace_s=cfg.server.request_timeout_secs,
            ),
        )
    )
    load_monitor = None
    if monitoring_enabled(cfg.routing):
        load_monitor = await core.start_child(
            ChildSpec(
                "load_monitor",
                lambda: LoadMonitorActor(
                    cell=deps.loads,
                    workers=lambda: deps.registry_cell.value.workers,
                    fetch=deps.load_fetch,
                    interval_s=cfg.routing.load_monitor_interval,
                    events=events,
                ),
            )
        )
    kv_events = None
    if deps.kv_indexes is not None:
        indexes = deps.kv_indexes
        kv_events = await core.start_child(
            ChildSpec(
                "kv_events",
                lambda: KvEventsActor(
                    KvEventsConfig(),
                    indexes=indexes,
                    events=events,
                    source=deps.kv_source,
                    registry=deps.registry_cell,
                ),
            )
        )
    await core.start_child(
        ChildSpec("worker_metrics", lambda: TransitionMetricsActor(deps.transitions, events))
    )
    if deps.idle is not None:
        idle = deps.idle
        await core.start_child(ChildSpec("idle_sweeper", lambda: IdleSweeperActor(idle)))
    return CoreActors(tokenizers, cache_index, registry, load_monitor, kv_events)
