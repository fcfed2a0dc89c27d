"""KvEventsActor: follows every gRPC worker's KV-event stream into the `KvIndexes` it owns.

Which workers: with a `source` (how to open a worker's stream; `engine_source`), it follows the
worker lifecycle on the event bus: a worker that becomes ready is watched (again: re-watching
replaces the stream, and the index rebuilds from the engine's replay), a removed one unwatched;
at start and on `Resync` it watches every ready worker the registry has and drops the rest. The
`Watch` and `Unwatch` messages do the same by hand.

One actor for all workers (one place owns the indexes, one mailbox for watch/unwatch); each
watched worker gets one subscription task spawned in the actor's TaskGroup, so a failing stream
never outlives or crashes the actor: it is logged and resubscribed. The request path reads the
indexes synchronously (`CacheAwarePolicy(kv_index=actor.indexes)`), like the cache-aware tree:
every mutation happens between awaits, so a reader never sees a batch half applied.

Per stream (the sequence rules live in `smg.pipeline.kv_index`):
* `open_stream` (the worker's entries are dropped, it is not authoritative), then subscribe from
  `REPLAY_FROM` = 1: every stream rebuilds the worker from whatever history the engine keeps,
  since a resumed cursor cannot tell a restarted engine from the one it followed;
* each batch: its `load` is published as an `EngineLoadReported` event (for the load monitor),
  then the index applies it (authoritative after the first event batch); a GAP verdict ends the
  stream and
  resubscribes at once (the engine's history usually still holds the missing batches);
* the stream ending or failing drops the worker's entries and resubscribes after an exponential
  backoff on the injected clock (`backoff_initial_s` doubling to `backoff_max_s`, reset by any
  stream that delivered a batch).

A supervisor restart builds a fresh actor without its watches: pass `indexes` in (the policy
holds the same object); with a `source` and the registry it watches the ready workers again at
start. A cancelled stream drops its worker's entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.messages import EngineLoadReported, Resync, WorkerHealthChanged, WorkerRemoved
from smg.actors.runtime import Actor
from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.pipeline.backends.grpc_pool import EnginePool, is_grpc_url
from smg.pipeline.kv_index import (
    DEFAULT_MAX_BLOCKS_PER_WORKER,
    REPLAY_FROM,
    KvIndex,
    KvIndexes,
    Verdict,
)

log = structlog.get_logger("smg.kv_events")

Subscribe = Callable[[int], AsyncIterator[Any]]
"""`start_sequence_number -> KvEventBatch stream`, e.g. `EngineClient.subscribe_kv_events`."""
WatchSource = Callable[[WorkerSnapshot], Subscribe | None]
"""How to open a worker's stream; None for a worker that has none (HTTP)."""


def engine_source(engines: EnginePool) -> WatchSource:
    """gRPC workers' streams, through their (already connected) engine clients."""

    def source(worker: WorkerSnapshot) -> Subscribe | None:
        if not is_grpc_url(worker.url):
            return None
        return engines.client(worker.url).subscribe_kv_events

    return source


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    backoff_initial_s: float = 0.1  # first retry after a stream failed or ended
    backoff_max_s: float = 5.0  # cap: a restarted engine is picked up within this
    max_blocks_per_worker: int = DEFAULT_MAX_BLOCKS_PER_WORKER  # bounds the index's memory


@dataclass(frozen=True, slots=True)
class Watch:
    """Follow `worker_id`'s stream into `model`'s index (re-watching replaces the stream)."""

    worker_id: str
    model: str
    subscribe: Subscribe = field(compare=False)


@dataclass(frozen=True, slots=True)
class Unwatch:
    """Stop following `worker_id` and drop its entries."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class KvStatus:
    """Ask: model -> worker -> index status plus stream counters."""


@dataclass(slots=True)
class StreamStats:
    subscribes: int = 0
    batches: int = 0
    gaps: int = 0
    resets: int = 0
    failures: int = 0


def backoff_s(cfg: KvEventsConfig, attempt: int) -> float:
    """Delay before retry number `attempt` (0-based)."""
    return float(min(cfg.backoff_max_s, cfg.backoff_initial_s * (2 ** min(attempt, 30))))


class KvEventsActor(Actor):
    def __init__(
        self,
        cfg: KvEventsConfig | None = None,
        *,
        indexes: KvIndexes | None = None,
        events: EventBus | None = None,
        source: WatchSource | None = None,
        registry: SnapshotCell[RegistrySnapshot] | None = None,
    ) -> None:
        """`events`: where loads are published (and, with `source`, where the lifecycle comes
        from); `registry`: the workers to watch at start and on `Resync`."""
        super().__init__()
        self.cfg = cfg or KvEventsConfig()
        self.indexes = indexes if indexes is not None else KvIndexes(self.cfg.max_blocks_per_worker)
        self.events = events
        self.source = source
        self.registry = registry
        self.stats: dict[str, StreamStats] = {}
        self._streams: dict[str, tuple[str, asyncio.Task[Any]]] = {}  # worker -> (model, task)

    async def on_start(self) -> None:
        if self.events is not None and self.source is not None:
            types = (WorkerHealthChanged, WorkerRemoved)
            self.events.subscribe(self.ref, types, Delivery.RESYNC)
            self._resync()

    async def handle(self, message: Any) -> Any:
        match message:
            case WorkerHealthChanged(worker=w, health=HealthStatus.READY):
                if self._present(w.worker_id):
                    self._watch_worker(w)
                return None
            case WorkerHealthChanged():
                return None  # a stream of a worker that went down fails and retries by itself
            case WorkerRemoved(worker=w):
                self._unwatch(w.worker_id)
                self.stats.pop(w.worker_id, None)
                return None
            case Resync():
                self._resync()
                return None
            case Watch(worker_id=wid, model=model, subscribe=subscribe):
                self._watch(wid, model, subscribe)
                return None
            case Unwatch(worker_id=wid):
                self._unwatch(wid)
                self.stats.pop(wid, None)
                return None
            case KvStatus():
                return self.status()
            case _:
                raise TypeError(f"KvEventsActor: unexpected message {message!r}")

    def _present(self, worker_id: str) -> bool:
        """Still registered (an event that arrives after a `Resync` may be older than it)."""
        return self.registry is None or worker_id in self.registry.value.by_id

    def _watch_worker(self, worker: WorkerSnapshot) -> None:
        if self.source is None or worker.model_id is None:
            return
        try:
            subscribe = self.source(worker)
        except Exception as exc:  # not connected (any more): its next ready transition retries
            log.info("kv_events_no_stream", worker=worker.worker_id, error=repr(exc))
            return
        if subscribe is not None:
            self._watch(worker.worker_id, worker.model_id, subscribe)

    def _watch(self, worker_id: str, model: str, subscribe: Subscribe) -> None:
        self._unwatch(worker_id)
        index = self.indexes.for_model(model)
        self.stats[worker_id] = StreamStats()
        task = self.spawn(self._follow(worker_id, index, subscribe), name=f"kv-events-{worker_id}")
        self._streams[worker_id] = (model, task)

    def _resync(self) -> None:
        """Watch every ready worker the registry has that is not watched; drop the others."""
        if self.registry is None:
            return
        workers = self.registry.value.by_id
        for worker_id in [w for w in self._streams if w not in workers]:
            self._unwatch(worker_id)
            self.stats.pop(worker_id, None)
        for w in workers.values():
            if w.healthy and w.worker_id not in self._streams:
                self._watch_worker(w)

    def status(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for wid, (model, _task) in self._streams.items():
            index = self.indexes.get(model)
            entry = index.status(wid) if index is not None else {"known": False}
            stats = self.stats.get(wid)
            if stats is not None:
                entry |= {
                    "subscribes": stats.subscribes,
                    "batches": stats.batches,
                    "gaps": stats.gaps,
                    "resets": stats.resets,
                    "failures": stats.failures,
                }
            out.setdefault(model, {})[wid] = entry
        return out

    def _unwatch(self, worker_id: str) -> None:
        entry = self._streams.pop(worker_id, None)
        if entry is not None:
            entry[1].cancel()
        self.indexes.forget(worker_id)

    async def _follow(self, worker_id: str, index: KvIndex, subscribe: Subscribe) -> None:
        stats = self.stats.setdefault(worker_id, StreamStats())
        attempt = 0
        while True:
            index.open_stream(worker_id)
            stats.subscribes += 1
            delivered = gap = False
            try:
                stream = subscribe(REPLAY_FROM)
                try:
                    async for batch in stream:
                        delivered = True
                        stats.batches += 1
                        self._forward_load(worker_id, batch)
                        verdict = index.apply_batch(worker_id, batch)
                        if verdict is Verdict.RESET:
                            stats.resets += 1
                            log.info("kv_events_reset", worker=worker_id, seq=batch.sequence_number)
                        elif verdict is Verdict.GAP:
                            stats.gaps += 1
                            gap = True
                            log.info("kv_events_gap", worker=worker_id, got=batch.sequence_number)
                            break
                finally:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
            except asyncio.CancelledError:
                index.mark_stale(worker_id)
                raise
            except Exception as exc:
                stats.failures += 1
                log.info("kv_events_stream_failed", worker=worker_id, error=str(exc))
            index.mark_stale(worker_id)
            if delivered:
                attempt = 0
            if gap:
                continue  # the engine's history most likely still holds the missing batches
            await self.clock.sleep(backoff_s(self.cfg, attempt))
            attempt += 1

    def _forward_load(self, worker_id: str, batch: Any) -> None:
        if self.events is not None and batch.HasField("load"):
            self.events.publish(EngineLoadReported(worker_id, batch.load))
