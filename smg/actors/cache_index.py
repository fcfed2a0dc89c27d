"""CacheIndexActor: owns the cache-aware routing state and its upkeep.

The policy matches and inserts on the request path (a synchronous call into the state this actor
owns: no await sits between match and insert, so it is never seen half-updated). Upkeep that can
be slow — the periodic LRU eviction to `--max-tree-size`, forgetting a removed worker — happens
here, off the request path, in response to messages.

Passes come every `--eviction-interval-secs`, and at once when the request path crosses a bound
(`CacheAwareState.on_pressure`: the trees past 90% of `--max-tree-bytes`, or a worker past
`--max-tree-size` in a tree), so the bounds hold between the periodic passes too; the byte cap
holds at all times (the state does not record an insert that could pass it).

An eviction pass over a large tree costs seconds of CPU (100k cached prefixes: ~1 s), so it runs
in slices of about `slice_target_s` each, yielding to the loop between slices: requests keep
matching and inserting while a pass is under way (the pure `Eviction` job copes with the tree
changing between its steps). The slice size is counted in work units and adapted after every
slice to the measured time, so it tracks the machine. A pass is one message: other messages wait
for it (a `ForgetWorker` is harmless to delay), except a stop, which ends the pass early.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg.actors.runtime import Actor
from smg.config import RoutingConfig

log = structlog.get_logger("smg.cache_index")

SLICE_TARGET_S = 0.002  # a loop stall nobody notices next to a request's own latency
MIN_SLICE_UNITS = 64
MAX_SLICE_UNITS = 1 << 16
FIRST_SLICE_UNITS = 512  # a unit is a node scanned or popped: ~1-4 µs


@dataclass(frozen=True, slots=True)
class Evict:
    pass


@dataclass(frozen=True, slots=True)
class ForgetWorker:
    worker_id: str


class CacheIndexActor(Actor):
    def __init__(
        self,
        policy: Any,
        cfg: RoutingConfig,
        *,
        slice_target_s: float = SLICE_TARGET_S,
        max_slice_units: int = MAX_SLICE_UNITS,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.cfg = cfg
        self.slice_target_s = slice_target_s
        self.max_slice_units = max_slice_units
        self.slice_units = min(FIRST_SLICE_UNITS, max_slice_units)
        self.evicted_total = 0
        self.passes = 0
        self.last_pass_slices = 0
        self.max_slice_s = 0.0  # the longest slice so far: the worst stall eviction caused

    async def on_start(self) -> None:
        if hasattr(self.policy, "evict") and self.cfg.eviction_interval_secs > 0:
            self.every(self.cfg.eviction_interval_secs, Evict())
        state = getattr(self.policy, "state", None)
        if state is not None and hasattr(state, "on_pressure"):
            state.on_pressure = self._wake
            state._pressed = False  # a pass a crashed predecessor never finished
            if state.byte_target() is not None:
                self._wake()

    async def on_stop(self) -> None:
        state = getattr(self.policy, "state", None)
        if state is not None and getattr(state, "on_pressure", None) == self._wake:
            state.on_pressure = None

    def _wake(self) -> None:
        """The request path crossed a bound: evict now (called at most once per pass)."""
        try:
            self.ref.tell(Evict())
        except Exception:  # stopping or full: the periodic pass and the byte cap still hold
            log.debug("cache_evict_wake_dropped")

    async def handle(self, message: Any) -> Any:
        match message:
            case Evict():
                if hasattr(self.policy, "begin_evict"):
                    evicted = await self._evict_in_slices()
                else:
                    evicted = int(self.policy.evict(self.cfg.max_tree_size) or 0)
                self.evicted_total += evicted
                self.passes += 1
                if evicted:
                    log.debug("cache_evicted", elements=evicted, slices=self.last_pass_slices)
                return evicted
            case ForgetWorker(worker_id=wid):
                self.policy.on_worker_removed(wid)
                return None
            case _:
                raise TypeError(f"CacheIndexActor: unexpected message {message!r}")

    async def _evict_in_slices(self) -> int:
        job = self.policy.begin_evict(self.cfg.max_tree_size)
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
        self.state = state

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
