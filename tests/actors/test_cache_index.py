"""CacheIndexActor: eviction runs in slices and the request path keeps running in between."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from support.event_log import worker_snapshot
from support.radix_checks import check_invariants

from smg.actors.cache_index import (
    MAX_SLICE_UNITS,
    MIN_SLICE_UNITS,
    CacheIndex,
    CacheIndexActor,
    Evict,
)
from smg.actors.event_bus import EventBus
from smg.actors.messages import CacheHintsImported, Resync, WorkerRemoved
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock, settle
from smg.config import RoutingConfig
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.policies.cache_aware import CacheAwarePolicy

WORKERS = ("w0", "w1")
BOUND = 400


@dataclass(frozen=True, slots=True)
class Cand:
    worker_id: str
    url: str = ""
    load: int = 0


class Env:
    """A cache-aware policy reading the state the actor owns, as the gateway builds them."""

    def __init__(self) -> None:
        self.clock = FakeClock(start=0.0)
        self.t = 0.0
        self.cfg = RoutingConfig(max_tree_size=BOUND, eviction_interval_secs=0)
        # the state's own bound left at its default, as the policy's was: no pass is asked for
        self.index = CacheIndex(RoutingConfig())
        self.policy = CacheAwarePolicy(
            cache_threshold=0.5,
            balance_abs_threshold=64,
            balance_rel_threshold=1.5,
            now=self.now,
            state=self.index.state,
            recorder=self.index.lane,
        )
        tree = self.index.state.tree("m")
        for i in range(200):  # 2 x 100 keys of 8 tokens: 800 per worker, twice the bound
            tree.insert([i, 1, 2, 3, 4, 5, 6, 7], WORKERS[i & 1], self.now())
        self.actor: CacheIndexActor | None = None

    def now(self) -> float:
        self.t += 1.0
        return self.t

    def make(self) -> CacheIndexActor:
        self.actor = CacheIndexActor(self.cfg, index=self.index, max_slice_units=8)
        return self.actor


@pytest.fixture
async def env() -> AsyncIterator[tuple[Env, ActorRef]]:
    e = Env()
    sup = Supervisor("cache", clock=e.clock)
    await sup.__aenter__()
    ref = await sup.start_child(ChildSpec("cache_index", e.make))
    try:
        yield e, ref
    finally:
        await sup.__aexit__(None, None, None)


async def test_requests_are_routed_between_slices_of_a_pass(env: tuple[Env, ActorRef]) -> None:
    e, ref = env
    routed = 0
    stop = asyncio.Event()

    async def requests() -> None:
        nonlocal routed
        i = 1000
        while not stop.is_set():
            e.policy.select([Cand(w) for w in WORKERS], RouteRequest(tokens=[i, 9], model="m"))
            check_invariants(e.policy.state.tree("m"))  # consistent whenever a request runs
            routed += 1
            i += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(requests())
    try:
        freed = await ref.ask(Evict(), timeout=5.0)
    finally:
        stop.set()
        await task
    assert e.actor is not None
    slices = e.actor.last_pass_slices
    assert slices >= 300 // 8, "8 units a slice: 200 nodes scanned + 100 popped"
    assert routed >= slices - 1, "a request ran between every two slices"
    assert freed >= 2 * 400, "each worker came down to the bound (bar the fresh keys)"
    # The keys inserted mid-pass may be left over; the next pass (no traffic) finishes the job.
    await ref.ask(Evict(), timeout=5.0)
    sizes = e.policy.state.tree("m").tenant_sizes()
    assert all(size <= BOUND for size in sizes.values()), sizes
    assert e.actor.passes == 2 and e.actor.evicted_total >= freed


async def test_a_stop_ends_a_pass_early(env: tuple[Env, ActorRef]) -> None:
    e, ref = env
    ref.tell(Evict())
    await settle(5)  # a few slices in
    ref.stop()
    await ref.wait_stopped()
    assert e.actor is not None
    assert 0 < e.actor.last_pass_slices < 300 // 8
    check_invariants(e.policy.state.tree("m"))


async def test_forget_worker_waits_for_the_pass_and_then_applies(
    env: tuple[Env, ActorRef],
) -> None:
    e, ref = env
    ref.tell(Evict())
    await ref.ask(WorkerRemoved(worker_snapshot("w0"), imported=False), timeout=5.0)
    tree = e.policy.state.tree("m")
    assert tree.tenant_sizes() == {"w1": BOUND}
    check_invariants(tree)


@pytest.mark.parametrize(
    ("units", "elapsed_s", "after"),
    [
        (512, 0.0030, 256),  # over the 2 ms target: halve
        (512, 0.0015, 512),  # within [target/2, target]: keep
        (512, 0.0005, 1024),  # well under: double
        (MIN_SLICE_UNITS, 1.0, MIN_SLICE_UNITS),  # floor
        (MAX_SLICE_UNITS, 0.0, MAX_SLICE_UNITS),  # ceiling
    ],
)
def test_slice_size_adapts_to_the_target(units: int, elapsed_s: float, after: int) -> None:
    actor = CacheIndexActor(RoutingConfig())
    actor.slice_units = units
    actor._adapt(elapsed_s)
    assert actor.slice_units == after


# --- ownership: the policy reads, the actor changes ----------------------------------------------
def prompt(i: int) -> RouteRequest:
    return RouteRequest(tokens=[7, 7, 7, 7, 7, 7, 7, 7, i], model="m")


def owned() -> tuple[CacheIndex, CacheAwarePolicy]:
    index = CacheIndex(RoutingConfig(eviction_interval_secs=0), lane_capacity=8)
    clock = iter(range(1, 1 << 30))
    policy = CacheAwarePolicy(
        cache_threshold=0.5,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        now=lambda: float(next(clock)),
        state=index.state,
        recorder=index.lane,
    )
    return index, policy


async def test_the_policy_never_changes_the_state_only_its_owner_does() -> None:
    index, policy = owned()
    cands = [Cand(w) for w in WORKERS]
    for i in range(5):
        assert policy.select(cands, prompt(i)) is not None  # no owner yet: decisions wait
    assert index.state.models == () and len(index.lane) == 5  # not even an empty tree made
    policy.on_worker_removed("w0")  # the owner's business: a no-op for this policy
    async with Supervisor("cache", clock=FakeClock()) as sup:
        actor = CacheIndexActor(RoutingConfig(eviction_interval_secs=0), index=index)
        ref = await sup.start_child(ChildSpec("cache_index", lambda: actor))
        assert len(index.lane) == 0 and actor.applied_total == 5  # taken over at start
        tree = index.state.find("m")
        assert tree.match([7] * 8).matched == 8
        for i in range(5, 10):  # routed back to back in one loop turn: one batch
            policy.select(cands, prompt(i))
        assert tree.match([7] * 8 + [9]).matched == 8, "the trees lag by one loop turn"
        await settle()
        assert (actor.applied_total, actor.batches) == (10, 2)
        assert tree.match([7] * 8 + [9]).matched == 9
        held = set(tree.tenant_sizes())
        await ref.ask(WorkerRemoved(worker_snapshot(sorted(held)[0]), imported=False), 5.0)
        assert sorted(held)[0] not in index.state.tenants()
    assert not index.lane.attached


def test_a_full_lane_drops_decisions_and_counts_them() -> None:
    index, policy = owned()  # nobody drains the lane (8 places)
    for i in range(11):
        assert policy.select([Cand(w) for w in WORKERS], prompt(i)) is not None
    assert len(index.lane) == 8 and index.lane.skipped == 3 and index.skipped == 3


async def test_hints_arrive_as_events_and_resync_forgets_the_departed() -> None:
    index, _ = owned()
    registry: SnapshotCell[RegistrySnapshot] = SnapshotCell(
        RegistrySnapshot.build((worker_snapshot("w1"),))
    )
    async with Supervisor("cache", clock=FakeClock()) as sup:
        bus = EventBus()
        cfg = RoutingConfig(eviction_interval_secs=0)
        await sup.start_child(
            ChildSpec(
                "cache_index",
                lambda: CacheIndexActor(cfg, index=index, registry=registry, events=bus),
            )
        )
        assert bus.publish(CacheHintsImported((("w0", (b"h0",)), ("w1", (b"h1",))))) == 1
        await settle()
        assert index.state.hints.workers() == {"w0", "w1"}
        index.state.tree("m").insert("abc", "w0", 1.0)
        assert bus.publish(Resync()) == 0  # the bus sends Resync itself, on overflow
        sub = bus.subscriptions()[0]
        sub.ref.tell_control(Resync())
        await settle()
        assert index.state.tenants() == {"w1"}  # w0 is not in the registry: forgotten
