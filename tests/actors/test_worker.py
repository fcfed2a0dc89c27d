"""WorkerActor and RegistryActor in simulated time, with a scripted prober (no sockets)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.event_log import EventLog, registry_spec

from smg.actors.event_bus import EventBus
from smg.actors.messages import (
    AddWorker,
    Outcome,
    RemoveWorker,
    WorkerAdded,
    WorkerBreakerChanged,
    WorkerHealthChanged,
    WorkerModelChanged,
    WorkerRemoved,
)
from smg.actors.registry import DuplicateWorker
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock, TimerHandle, settle
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core.circuit_breaker import BreakerState
from smg.core.health import BACKOFF_MAX_S, RECHECK_S, HealthStatus, ProbeResult
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot


class ScriptedProber:
    def __init__(self) -> None:
        self.ok = True
        self.calls = 0

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        self.calls += 1
        return ProbeResult(ok=self.ok, model_id="m" if self.ok else None)


HEALTH = HealthConfig(
    health_failure_threshold=2, health_success_threshold=2, health_check_interval_secs=10.0
)
BREAKER = CircuitBreakerConfig(
    cb_failure_threshold=3, cb_success_threshold=1, cb_timeout_duration_secs=5.0
)


LIFECYCLE = (
    WorkerAdded,
    WorkerRemoved,
    WorkerHealthChanged,
    WorkerBreakerChanged,
    WorkerModelChanged,
)


async def start(
    clock: FakeClock, prober: ScriptedProber, events: list[Any]
) -> tuple[Any, Any, Any]:
    """The registry, publishing on a bus; `events` collects every lifecycle event, in order."""
    cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
    bus = EventBus()
    wsup = Supervisor("workers", clock=clock)
    core = Supervisor("core", clock=clock)
    await wsup.__aenter__()
    await core.__aenter__()
    bus.subscribe(await core.start_child(ChildSpec("log", lambda: EventLog(events))), LIFECYCLE)
    registry = await core.start_child(registry_spec(cell, wsup, prober, bus, HEALTH, BREAKER))
    return cell, registry, (wsup, core)


async def stop(sups: tuple[Supervisor, Supervisor]) -> None:
    for sup in reversed(sups):
        await sup.__aexit__(None, None, None)


async def test_worker_becomes_ready_learns_model_and_goes_not_ready() -> None:
    clock = FakeClock()
    prober = ScriptedProber()
    cell, registry, sups = await start(clock, prober, [])
    try:
        snap = await registry.ask(AddWorker("127.0.0.1:9000/"), 1.0)
        assert snap.url == "http://127.0.0.1:9000" and snap.health is HealthStatus.PENDING
        await settle()
        w = cell.value.by_id[snap.worker_id]
        assert w.model_id == "m" and w.health is HealthStatus.PENDING  # one success so far
        await clock.advance(1.0)  # registering workers are re-probed quickly
        w = cell.value.by_id[snap.worker_id]
        assert w.health is HealthStatus.READY and w.routable(clock.now())
        assert cell.value.by_model["m"] == (w,)
        prober.ok = False
        await clock.advance(10.0)
        assert cell.value.by_id[snap.worker_id].health is HealthStatus.READY
        await clock.advance(10.0)
        assert cell.value.by_id[snap.worker_id].health is HealthStatus.NOT_READY
        assert cell.value.models() == []
        calls = prober.calls
        await clock.advance(30.0)
        # a worker that is down is probed with backoff: every BACKOFF_MAX_S at most, no more
        assert 30 / BACKOFF_MAX_S - 2 <= prober.calls - calls <= 30 / BACKOFF_MAX_S + 30 / 10
        prober.ok = True  # it comes back: ready within a backoff step and a recheck
        await clock.advance(BACKOFF_MAX_S + 2 * RECHECK_S)
        assert cell.value.by_id[snap.worker_id].health is HealthStatus.READY
        calls = prober.calls
        await clock.advance(30.0)
        assert prober.calls == calls + 3  # ready: one probe per interval, no more
    finally:
        await stop(sups)


async def test_breaker_opens_on_failures_then_half_opens_after_timeout() -> None:
    clock = FakeClock()
    prober = ScriptedProber()
    cell, registry, sups = await start(clock, prober, [])
    try:
        snap = await registry.ask(AddWorker("http://w:1"), 1.0)
        await clock.advance(1.0)
        w = cell.value.by_id[snap.worker_id]
        assert w.ref is not None and not w.breaker_counting
        for _ in range(3):
            w.ref.tell(Outcome(False))
        await settle()
        w = cell.value.by_id[snap.worker_id]
        assert w.breaker.state is BreakerState.OPEN and not w.routable(clock.now())
        await clock.advance(5.0)
        w = cell.value.by_id[snap.worker_id]
        assert w.breaker.state is BreakerState.HALF_OPEN and w.routable(clock.now())
        w.ref.tell(Outcome(True))
        await settle()
        w = cell.value.by_id[snap.worker_id]
        assert w.breaker.state is BreakerState.CLOSED and not w.breaker_counting
    finally:
        await stop(sups)


class EarlyClock(FakeClock):
    """Timers fire a hair before their deadline, as uvloop's millisecond timers can."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return super().call_later(max(0.0, delay - 0.0005), callback)


async def test_a_timer_firing_early_does_not_leave_the_breaker_open() -> None:
    clock = EarlyClock()
    cell, registry, sups = await start(clock, ScriptedProber(), [])
    try:
        snap = await registry.ask(AddWorker("http://w:1"), 1.0)
        await clock.advance(1.0)
        w = cell.value.by_id[snap.worker_id]
        assert w.ref is not None
        for _ in range(3):
            w.ref.tell(Outcome(False))
        await settle()
        await clock.advance(4.9996)  # the open timer fired, early: still open
        assert cell.value.by_id[snap.worker_id].breaker.state is BreakerState.OPEN
        await clock.advance(0.01)  # the re-armed poll moves it on
        assert cell.value.by_id[snap.worker_id].breaker.state is BreakerState.HALF_OPEN
    finally:
        await stop(sups)


async def test_duplicate_and_remove() -> None:
    clock = FakeClock()
    events: list[Any] = []
    cell, registry, sups = await start(clock, ScriptedProber(), events)
    try:
        snap = await registry.ask(AddWorker("http://w:1"), 1.0)
        try:
            await registry.ask(AddWorker("http://w:1/"), 1.0)
            raise AssertionError("duplicate accepted")
        except DuplicateWorker as dup:
            assert dup.worker_id == snap.worker_id
        gone = await registry.ask(RemoveWorker(snap.worker_id), 1.0)
        await settle()  # the events reach their subscriber through its mailbox
        removed = [e.worker.url for e in events if isinstance(e, WorkerRemoved)]
        assert gone is not None and removed == ["http://w:1"]
        assert cell.value.workers == ()
        assert await registry.ask(RemoveWorker(snap.worker_id), 1.0) is None
        assert sups[0].children() == []
    finally:
        await stop(sups)


async def test_the_registry_publishes_a_workers_life_in_order() -> None:
    """Each change a worker's snapshot shows becomes one typed event, in the order it happened;
    its removal comes last, with its last snapshot."""
    clock = FakeClock()
    prober = ScriptedProber()
    events: list[Any] = []
    cell, registry, sups = await start(clock, prober, events)
    try:
        snap = await registry.ask(AddWorker("http://w:1"), 1.0)
        await clock.advance(1.0)  # model learned, then ready
        w = cell.value.by_id[snap.worker_id]
        assert w.ref is not None
        for _ in range(3):
            w.ref.tell(Outcome(False))
        await settle()
        await clock.advance(5.0)  # open -> half-open
        prober.ok = False
        await clock.advance(20.0)  # two failed probes: not ready
        await registry.ask(RemoveWorker(snap.worker_id), 1.0)
        await settle()
    finally:
        await stop(sups)
    seen = [
        (type(e).__name__, getattr(e, "health", None) or getattr(e, "state", None)) for e in events
    ]
    assert seen == [
        ("WorkerAdded", None),
        ("WorkerModelChanged", None),
        ("WorkerHealthChanged", HealthStatus.READY),
        ("WorkerBreakerChanged", BreakerState.OPEN),
        ("WorkerBreakerChanged", BreakerState.HALF_OPEN),
        ("WorkerHealthChanged", HealthStatus.NOT_READY),
        ("WorkerRemoved", None),
    ]
    assert all(e.worker.worker_id == snap.worker_id for e in events)
    assert events[1].model_id == "m" and not events[0].imported and not events[-1].imported
    assert events[-1].worker.health is HealthStatus.NOT_READY  # its last snapshot


async def test_a_worker_answering_traffic_survives_failed_checks() -> None:
    """Passive health: a READY worker whose answers move between checks is not taken out by
    failed (slow) checks; once the traffic stops, the same checks take it out."""
    clock = FakeClock()
    prober = ScriptedProber()
    cell, registry, sups = await start(clock, prober, [])
    try:
        snap = await registry.ask(AddWorker("http://w:1"), 1.0)
        await clock.advance(1.0)
        w = cell.value.by_id[snap.worker_id]
        assert w.health is HealthStatus.READY
        prober.ok = False
        for _ in range(5):  # five intervals, the request path answering in each
            w.counter.answered += 7
            await clock.advance(10.0)
        w = cell.value.by_id[snap.worker_id]
        assert w.health is HealthStatus.READY and w.routable(clock.now())
        assert w.counter.probes_excused == 5 and w.counter.probes_failed == 0
        await clock.advance(20.0)  # no traffic: two counted failures (threshold 2)
        w = cell.value.by_id[snap.worker_id]
        assert w.health is HealthStatus.NOT_READY and w.counter.probes_failed >= 2  # + rechecks
    finally:
        await stop(sups)
