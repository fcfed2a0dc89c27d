"""CacheIndexActor: owns the cache-aware routing state (the prefix trees, the recent prefixes per
worker, the mesh's hints) and every change made to it.

The request path only reads the state: the policy matches against the trees in place (same
event loop; the trees change only inside this actor's handlers, between awaits, so a read never
sees half an update; copying a 64 MB tree to publish it is out of the question). What it decides
("worker w now holds key k") goes into the `InsertLane`, a bounded list that this actor drains
in batches: appending costs the request ~0.1 µs, and the first decision of a batch wakes the
actor (one `ApplyInserts` per batch, not per request). The trees thus lag the decisions by one
turn of the event loop: a request routed in the same turn as an identical one does not see it.

Everything else that changes the state happens here too, in response to messages:
- eviction: every `--eviction-interval-secs`, and at once when a batch takes the trees past a
  bound (90% of `--max-tree-bytes`, or a worker 10% past `--max-tree-size` in a tree); the byte
  cap holds at all times (the state does not record an insert that could pass it);
- a worker removed (`WorkerRemoved`, from the event bus): its entries go, and the other
  policies given in `forget` drop it from their own state;
- hints from the mesh (`CacheHintsImported`): other nodes' routed prefixes, by hash;
- `Resync` (the bus dropped events for us): forget every worker the registry no longer has.

An eviction pass over a large tree costs seconds of CPU (100k cached prefixes: ~1 s), so it runs
in slices of about `slice_target_s` each, yielding to the loop between slices and applying the
lane's inserts between them, so requests keep being recorded while a pass is under way (the pure
`Eviction` job copes with the tree changing between its steps). The slice size is counted in
work units and adapted after every slice to the measured time, so it tracks the machine. A pass
is one message: other messages wait for it, except a stop, which ends the pass early.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.mailbox import MailboxClosed, MailboxFull
from smg.actors.messages import CacheHintsImported, Resync, WorkerRemoved
from smg.actors.runtime import Actor, ActorRef
from smg.config import RoutingConfig
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.pipeline.cache_state import CacheAwareState
from smg.pipeline.loads import BoardCell
from smg.pipeline.policies import Policy, make_policy

log = structlog.get_logger("smg.cache_index")

SLICE_TARGET_S = 0.002  # a loop stall nobody notices next to a request's own latency
MIN_SLICE_UNITS = 64
MAX_SLICE_UNITS = 1 << 16
FIRST_SLICE_UNITS = 512  # a unit is a node scanned or popped: ~1-4 µs
LANE_CAPACITY = 1024  # decisions waiting for the actor; it drains them every loop turn


@dataclass(frozen=True, slots=True)
class Evict:
    pass


@dataclass(frozen=True, slots=True)
class ApplyInserts:
    """The lane has decisions waiting (one doorbell per batch)."""


_APPLY = ApplyInserts()
Pending = tuple[str, "str | Sequence[int]", str, float]  # model, key, worker id, when


class InsertLane:
    """The policy's decisions on their way to the cache-index actor (a `Recorder`).

    Bounded: past `capacity` waiting decisions (the actor is stalled) a decision is dropped and
    counted, like an insert over the byte cap: the request still routes, its prefix leaves no
    trace. A key is kept by reference until applied (the tree copies it then), so callers must
    not change a key after routing it (the gateway never does: token ids are not edited once
    the prompt is tokenized).
    """

    __slots__ = ("_owner", "_pending", "_rung", "capacity", "skipped")

    def __init__(self, capacity: int = LANE_CAPACITY) -> None:
        self.capacity = capacity
        self.skipped = 0
        self._pending: list[Pending] = []
        self._owner: ActorRef | None = None
        self._rung = False

    def __len__(self) -> int:
        return len(self._pending)

    def record(self, model: str, key: str | Sequence[int], worker_id: str, now: float) -> None:
        pending = self._pending
        if len(pending) >= self.capacity:
            self.skipped += 1
            return
        pending.append((model, key, worker_id, now))
        if not self._rung and self._owner is not None:
            try:
                self._owner.tell(_APPLY)
                self._rung = True
            except (MailboxFull, MailboxClosed):
                pass  # the next decision rings again; the owner drains all at once

    def take(self) -> list[Pending]:
        """Everything waiting, oldest first (for the owner)."""
        batch, self._pending = self._pending, []
        self._rung = False
        return batch

    def attach(self, owner: ActorRef | None) -> None:
        self._owner = owner
        self._rung = False

    @property
    def attached(self) -> bool:
        """Whether an owner drains the lane (a running cache-index actor)."""
        return self._owner is not None


class CacheIndex:
    """The cache-aware state and its lane, built together by the composition root: the policy
    gets `state` to read and `lane` to record into, the actor gets both."""

    def __init__(self, cfg: RoutingConfig, lane_capacity: int = LANE_CAPACITY) -> None:
        self.state = CacheAwareState(cfg.max_tree_bytes, cfg.max_tree_size)
        self.lane = InsertLane(lane_capacity)

    @property
    def total_bytes(self) -> int:
        return self.state.total_bytes

    @property
    def max_bytes(self) -> int:
        return self.state.max_bytes

    @property
    def skipped(self) -> int:
        return self.state.skipped + self.lane.skipped


def routing_policy(
    cfg: RoutingConfig,
    rng: random.Random,
    now: Callable[[], float],
    loads: BoardCell | None,
    *,
    hash_misses: bool = False,
) -> tuple[Policy, CacheIndex | None]:
    """The gateway's routing policy; a cache-aware one comes with the `CacheIndex` it reads and
    records into, for a `CacheIndexActor` to own. `hash_misses`: see `make_policy`."""
    if cfg.policy != "cache_aware":
        return make_policy(cfg.policy, cfg, rng, now, loads=loads), None
    index = CacheIndex(cfg)
    policy = make_policy(
        cfg.policy,
        cfg,
        rng,
        now,
        loads=loads,
        cache_state=index.state,
        recorder=index.lane,
        hash_misses=hash_misses,
    )
    return policy, index


class CacheIndexActor(Actor):
    def __init__(
        self,
        cfg: RoutingConfig,
        *,
        index: CacheIndex | None = None,
        forget: Sequence[Policy] = (),
        registry: SnapshotCell[RegistrySnapshot] | None = None,
        events: EventBus | None = None,
        slice_target_s: float = SLICE_TARGET_S,
        max_slice_units: int = MAX_SLICE_UNITS,
    ) -> None:
        """`index`: the cache-aware state this actor owns (None: no cache-aware policy);
        `forget`: other policies to tell about removed workers; `registry`: read on `Resync`."""
        super().__init__()
        self.cfg = cfg
        self.index = index
        self.forget = tuple(forget)
        self.registry = registry
        self.events = events
        self.slice_target_s = slice_target_s
        self.max_slice_units = max_slice_units
        self.slice_units = min(FIRST_SLICE_UNITS, max_slice_units)
        self.evicted_total = 0
        self.applied_total = 0  # decisions recorded
        self.batches = 0  # ... in this many batches
        self.passes = 0
        self.last_pass_slices = 0
        self.max_slice_s = 0.0  # the longest slice so far: the worst stall eviction caused

    async def on_start(self) -> None:
        if self.events is not None:
            self.events.subscribe(self.ref, (WorkerRemoved, CacheHintsImported), Delivery.RESYNC)
        if self.index is None:
            return
        if self.cfg.eviction_interval_secs > 0:
            self.every(self.cfg.eviction_interval_secs, Evict())
        self.index.state.rearm_pressure()  # a pass a crashed predecessor never finished
        self.index.lane.attach(self.ref)
        self._apply()  # what was routed while no owner ran
        if self.index.state.byte_target() is not None:
            self._wake()

    async def on_stop(self) -> None:
        if self.index is not None:
            self.index.lane.attach(None)

    def _wake(self) -> None:
        """A bound was crossed: evict now (at most once per pass)."""
        try:
            self.ref.tell(Evict())
        except Exception:  # stopping or full: the periodic pass and the byte cap still hold
            log.debug("cache_evict_wake_dropped")

    async def handle(self, message: Any) -> Any:
        match message:
            case ApplyInserts():
                self._apply()
                return None
            case Evict():
                if self.index is None:
                    return 0
                evicted = await self._evict_in_slices(self.index.state)
                self.evicted_total += evicted
                self.passes += 1
                if evicted:
                    log.debug("cache_evicted", elements=evicted, slices=self.last_pass_slices)
                return evicted
            case WorkerRemoved(worker=w):
                self._forget(w.worker_id)
                return None
            case CacheHintsImported(hints=hints):
                if self.index is not None:
                    learn = self.index.state.hints.learn
                    for worker_id, hashes in hints:
                        learn(worker_id, hashes)
                return None
            case Resync():
                self._resync()
                return None
            case _:
                raise TypeError(f"CacheIndexActor: unexpected message {message!r}")

    def _apply(self) -> None:
        """Record the lane's decisions in the trees (then evict, if that crossed a bound)."""
        if self.index is None:
            return
        state = self.index.state
        batch = self.index.lane.take()
        record = state.record
        for model, key, worker_id, now in batch:
            record(model, key, worker_id, now)
        self.applied_total += len(batch)
        self.batches += bool(batch)
        if state.take_pressure():
            self._wake()

    def _forget(self, worker_id: str) -> None:
        if self.index is not None:
            self._apply()  # decisions for the worker made before it left go first
            self.index.state.remove_tenant(worker_id)
        for policy in self.forget:
            policy.on_worker_removed(worker_id)

    def _resync(self) -> None:
        """Removals may have been lost: forget every worker the registry no longer has."""
        if self.index is None or self.registry is None:
            return
        self._apply()
        present = self.registry.value.by_id
        gone = [w for w in self.index.state.tenants() if w not in present]
        for worker_id in gone:
            self.index.state.remove_tenant(worker_id)
        log.info("cache_index_resync", forgotten=len(gone))

    async def _evict_in_slices(self, state: CacheAwareState) -> int:
        job = state.begin_evict(self.cfg.max_tree_size)
        now = self.clock.now
        slices = 0
        while True:
            t0 = now()
            done = job.step(self.slice_units)
            elapsed = now() - t0
            slices += 1
            self.max_slice_s = max(self.max_slice_s, elapsed)
            self._adapt(elapsed)
            if done or self.stop_requested:
                break
            await self.clock.sleep(0)  # let requests (and the ticker) run between slices
            self._apply()  # ... and record what they decided
        self.last_pass_slices = slices
        return int(job.freed)

    def _adapt(self, elapsed_s: float) -> None:
        """Halve the slice when it ran long, double it when it ran well under the target."""
        if elapsed_s > self.slice_target_s:
            self.slice_units = max(MIN_SLICE_UNITS, self.slice_units // 2)
        elif elapsed_s < self.slice_target_s / 2:
            self.slice_units = min(self.max_slice_units, self.slice_units * 2)


class CacheTreeCollector(Collector):
    """`smg_cache_tree_bytes` (estimated memory of the cache-aware prefix trees), its cap, and
    `smg_cache_tree_inserts_skipped_total` (prefixes not recorded because of the cap)."""

    def __init__(self, state: Any) -> None:
        self.state = state  # a CacheIndex or a CacheAwareState

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = self.state
        used = GaugeMetricFamily("smg_cache_tree_bytes", "Estimated bytes of the prefix trees")
        used.add_metric([], state.total_bytes)
        cap = GaugeMetricFamily("smg_cache_tree_max_bytes", "Cap on smg_cache_tree_bytes")
        cap.add_metric([], state.max_bytes)
        skipped = CounterMetricFamily(
            "smg_cache_tree_inserts_skipped", "Prefixes not recorded: the trees were at the cap"
        )
        skipped.add_metric([], state.skipped)
        yield from (used, cap, skipped)
