"""The simulated gRPC engine's KV-event fan-out: numbered batches, replay history, load records.

The engine actor (`engine_actor.SimEngine`) hands over the scheduler's KV events after every
pump (`publish`); each SubscribeKvEvents call reads one `stream`.

KV events: the first batch a publisher sends is numbered 1 (0 means "nothing yet"), each batch
carries the events of one pump and the engine's load; a stream resumes from
`start_sequence_number` out of the last `KV_HISTORY_BATCHES` batches (0: live only). Load-only
batches repeat the stream's last sequence number: one first when the subscriber asks for load
records before the first batch, then one per load change without events (coalesced) and one
every `heartbeat_s` while idle. A subscriber too slow for `KV_SUBSCRIBER_QUEUE` batches has
its stream ended, to resume from its cursor.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable

from smg_grpc_proto.generated import common_pb2

from smg.clock import Clock
from smg.sim.engine_core import Load
from smg.sim.prefix_cache import BlocksRemoved, BlocksStored, KvEvent

KV_HISTORY_BATCHES = 4096
KV_SUBSCRIBER_QUEUE = 8192


class _Subscriber:
    __slots__ = ("dirty", "overflow", "queue", "wake")

    def __init__(self) -> None:
        self.queue: deque[tuple[int, float, list[common_pb2.KvCacheEvent]]] = deque()
        self.dirty = False
        self.overflow = False
        self.wake = asyncio.Event()


class KvPublisher:
    """One engine's KV-event history and subscribers; lives on the engine's loop."""

    def __init__(
        self,
        *,
        block_size: int,
        heartbeat_s: float,
        load: Callable[[], Load],
        clock: Clock,
        wall: Callable[[], float],
    ) -> None:
        self.block_size = block_size
        self.heartbeat_s = heartbeat_s
        self.load = load
        self.clock = clock
        self.wall = wall
        self._subscribers: set[_Subscriber] = set()
        self._history: deque[tuple[int, float, list[common_pb2.KvCacheEvent]]] = deque(
            maxlen=KV_HISTORY_BATCHES
        )
        self._kv_seq = 0
        self._event_id = 0

    def publish(self, events: list[KvEvent], load_changed: bool) -> None:
        """One pump's events (a numbered batch), or else a load change (a load-only batch)."""
        if events:
            self._kv_seq += 1
            entry = (self._kv_seq, self.wall(), [self._event_proto(e) for e in events])
            self._history.append(entry)
            for sub in self._subscribers:
                if len(sub.queue) >= KV_SUBSCRIBER_QUEUE:
                    sub.overflow = True
                else:
                    sub.queue.append(entry)
                sub.wake.set()
        elif load_changed:
            for sub in self._subscribers:
                sub.dirty = True
                sub.wake.set()

    def _event_proto(self, event: KvEvent) -> common_pb2.KvCacheEvent:
        self._event_id += 1
        tier, medium = common_pb2.KV_CACHE_TIER_DEVICE, "GPU"
        if isinstance(event, BlocksStored):
            bs = self.block_size
            stored = common_pb2.KvBlocksStored(
                blocks=[common_pb2.KvBlock(block_hash=h, token_ids=t, block_size=bs)
                        for h, t in event.blocks],
                tier=tier, medium=medium,
            )  # fmt: skip
            if event.parent_hash is not None:
                stored.parent_block_hash = event.parent_hash
            return common_pb2.KvCacheEvent(event_id=self._event_id, stored=stored)
        if isinstance(event, BlocksRemoved):
            removed = common_pb2.KvBlocksRemoved(
                block_hashes=event.hashes, tier=tier, medium=medium
            )
            return common_pb2.KvCacheEvent(event_id=self._event_id, removed=removed)
        return common_pb2.KvCacheEvent(event_id=self._event_id, cleared=common_pb2.KvCacheCleared())

    def engine_load(
        self, sample: int, *, load_only: bool, telemetry: bool
    ) -> common_pb2.EngineLoad:
        ld = self.load()
        rec = common_pb2.EngineLoad(
            running_requests=ld.running,
            waiting_requests=ld.waiting,
            waiting_uncached_tokens=ld.waiting_uncached_tokens,
            token_usage=ld.token_usage,
            active_token_usage=ld.active_token_usage,
            gen_throughput=ld.gen_throughput,
            max_running_requests=ld.max_batch,
            sample=sample,
            load_only=load_only,
            prefill_pending_tokens=ld.prefill_pending_tokens,
        )
        if telemetry:
            rec.cache_hit_rate = ld.cache_hit_rate
            rec.num_used_tokens = ld.used_tokens
            rec.max_total_num_tokens = ld.capacity_tokens
            rec.queues.waiting = ld.waiting
        return rec

    async def stream(
        self, start_sequence: int, load_first: bool
    ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """One SubscribeKvEvents stream: replay from `start_sequence` (0: live only), then live
        batches; load-only batches on load changes and every `heartbeat_s` when idle."""
        sub = _Subscriber()
        if start_sequence > 0:
            sub.queue.extend(e for e in self._history if e[0] >= start_sequence)
        self._subscribers.add(sub)
        last_seq, sample, started = 0, 0, load_first
        try:
            if load_first:
                yield self._batch(0, [], sample, load_only=True)
            while True:
                sub.wake.clear()
                if sub.queue:
                    seq, ts, events = sub.queue.popleft()
                    sample += 1
                    batch = self._batch(seq, events, sample, load_only=False, telemetry=not started)
                    batch.timestamp = ts
                    last_seq, started = seq, True
                    yield batch
                    continue
                if sub.overflow:
                    return  # the subscriber resumes from its cursor on a new stream
                if not sub.dirty:
                    timer = self.clock.call_later(self.heartbeat_s, sub.wake.set)
                    try:
                        await sub.wake.wait()
                    finally:
                        timer.cancel()
                    if sub.queue or sub.overflow:
                        continue
                sub.dirty = False  # a load change, or the idle heartbeat
                if started:
                    sample += 1
                    yield self._batch(last_seq, [], sample, load_only=True)
        finally:
            self._subscribers.discard(sub)

    def _batch(
        self, seq: int, events: list[common_pb2.KvCacheEvent], sample: int, *,
        load_only: bool, telemetry: bool = True,
    ) -> common_pb2.KvEventBatch:  # fmt: skip
        return common_pb2.KvEventBatch(
            sequence_number=seq,
            timestamp=self.wall(),
            events=events,
            dp_rank=0,
            load=self.engine_load(sample, load_only=load_only, telemetry=telemetry or load_only),
        )
