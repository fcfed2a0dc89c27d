"""KvEventsActor: follows every gRPC worker's KV-event stream into the `KvIndexes` it owns.

One actor for all workers (one place owns the indexes, one mailbox for watch/unwatch); each
watched worker gets one subscription task spawned in the actor's TaskGroup, so a failing stream
never outlives or crashes the actor: it is logged and resubscribed. The request path reads the
indexes synchronously (`CacheAwarePolicy(kv_index=actor.indexes)`), like the cache-aware tree:
every mutation happens between awaits, so a reader never sees a batch half applied.

Per stream (the sequence rules live in `smg.pipeline.kv_index`):
* `open_stream` (the worker's entries are dropped, it is not authoritative), then subscribe from
  `REPLAY_FROM` = 1: every stream rebuilds the worker from whatever history the engine keeps,
  since a resumed cursor cannot tell a restarted engine from the one it followed;
* each batch: its `load` goes to `on_load(worker_id, EngineLoad)` when given, then the index
  applies it (authoritative after the first event batch); a GAP verdict ends the stream and
  resubscribes at once (the engine's history usually still holds the missing batches);
* the stream ending or failing drops the worker's entries and resubscribes after an exponential
  backoff on the injected clock (`backoff_initial_s` doubling to `backoff_max_s`, reset by any
  stream that delivered a batch).

A supervisor restart builds a fresh actor without its watches: pass `indexes` in (the policy
holds the same object) and send `Watch` again. A cancelled stream drops its worker's entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from smg.actors.runtime import Actor
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
OnLoad = Callable[[str, Any], None]
"""`(worker_id, EngineLoad)`: each load record carried by a batch."""


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
        on_load: OnLoad | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg or KvEventsConfig()
        self.indexes = indexes if indexes is not None else KvIndexes(self.cfg.max_blocks_per_worker)
        self.on_load = on_load
        self.stats: dict[str, StreamStats] = {}
        self._streams: dict[str, tuple[str, asyncio.Task[Any]]] = {}  # worker -> (model, task)

    async def handle(self, message: Any) -> Any:
        match message:
            case Watch(worker_id=wid, model=model, subscribe=subscribe):
                self._unwatch(wid)
                index = self.indexes.for_model(model)
                self.stats[wid] = StreamStats()
                task = self.spawn(self._follow(wid, index, subscribe), name=f"kv-events-{wid}")
                self._streams[wid] = (model, task)
                return None
            case Unwatch(worker_id=wid):
                self._unwatch(wid)
                self.stats.pop(wid, None)
                return None
            case KvStatus():
                return self.status()
            case _:
                raise TypeError(f"KvEventsActor: unexpected message {message!r}")

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
        if self.on_load is None or not batch.HasField("load"):
            return
        try:
            self.on_load(worker_id, batch.load)
        except Exception as exc:  # the load monitor's bug must not cost us the stream
            log.warning("kv_events_on_load_failed", worker=worker_id, error=repr(exc))
