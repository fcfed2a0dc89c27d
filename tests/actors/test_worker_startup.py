"""The start-up and health flags on a worker's life, in simulated time (scripted prober):
--worker-startup-delay, --worker-startup-check-interval, --worker-startup-timeout-secs,
--disable-health-check and --remove-unhealthy-workers, with the Rust gateway's semantics."""

from __future__ import annotations

from typing import Any

import pytest
from support.event_log import EventLog, registry_spec

from smg.actors.event_bus import EventBus
from smg.actors.messages import AddWorker, WorkerRemoved
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock
from smg.config import ConfigError, HealthConfig, check_health
from smg.core.health import HealthStatus, ProbeResult
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot


class Prober:
    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.times: list[float] = []
        self.clock: FakeClock | None = None

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        assert self.clock is not None
        self.times.append(self.clock.now())
        return ProbeResult(ok=self.ok, model_id="m")


class Fleet:
    def __init__(self, cfg: HealthConfig, ok: bool) -> None:
        self.clock = FakeClock()
        self.prober = Prober(ok)
        self.prober.clock = self.clock
        self.cfg = cfg
        self.events: list[Any] = []
        self.cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())

    async def __aenter__(self) -> Fleet:
        bus = EventBus()
        self.wsup = Supervisor("workers", clock=self.clock)
        self.core = Supervisor("core", clock=self.clock)
        await self.wsup.__aenter__()
        await self.core.__aenter__()
        log = await self.core.start_child(ChildSpec("log", lambda: EventLog(self.events)))
        bus.subscribe(log, (WorkerRemoved,))
        spec = registry_spec(self.cell, self.wsup, self.prober, bus, self.cfg)
        self.registry = await self.core.start_child(spec)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.core.__aexit__(None, None, None)
        await self.wsup.__aexit__(None, None, None)

    async def add(self) -> str:
        snap = await self.registry.ask(AddWorker("http://w:1"), 1.0)
        return str(snap.worker_id)

    def health(self, wid: str) -> HealthStatus | None:
        w = self.cell.value.by_id.get(wid)
        return None if w is None else w.health


BASE = dict(health_success_threshold=2, health_failure_threshold=1, health_check_interval_secs=10.0)


async def test_the_first_check_waits_the_startup_delay() -> None:
    async with Fleet(HealthConfig(**BASE, worker_startup_delay=3.0), ok=True) as f:
        wid = await f.add()
        await f.clock.advance(2.9)
        assert f.prober.times == [] and f.health(wid) is HealthStatus.PENDING
        await f.clock.advance(1.0)
        assert f.prober.times and f.prober.times[0] >= 3.0
        assert f.health(wid) is HealthStatus.READY


async def test_a_starting_worker_is_checked_at_least_every_startup_interval() -> None:
    cfg = HealthConfig(**BASE, worker_startup_check_interval=0.5)
    async with Fleet(cfg, ok=False) as f:
        await f.add()
        await f.clock.advance(10.0)
        gaps = [b - a for a, b in zip(f.prober.times, f.prober.times[1:], strict=False)]
        assert gaps and max(gaps) <= 0.5 + 1e-9  # the 2 s backoff cap is lowered to 0.5 s


async def test_a_worker_never_ready_within_the_startup_timeout_is_removed() -> None:
    async with Fleet(HealthConfig(**BASE, worker_startup_timeout_secs=5.0), ok=False) as f:
        wid = await f.add()
        await f.clock.advance(4.0)
        assert f.health(wid) is HealthStatus.NOT_READY
        await f.clock.advance(3.0)
        assert f.health(wid) is None  # gone from the registry
        assert [e.worker.worker_id for e in f.events] == [wid]
        calls = len(f.prober.times)
        await f.clock.advance(30.0)
        assert len(f.prober.times) == calls  # and no longer checked


async def test_a_worker_ready_once_is_not_removed_by_the_startup_timeout() -> None:
    async with Fleet(HealthConfig(**BASE, worker_startup_timeout_secs=5.0), ok=True) as f:
        wid = await f.add()
        await f.clock.advance(1.0)
        assert f.health(wid) is HealthStatus.READY
        f.prober.ok = False
        await f.clock.advance(30.0)
        assert f.health(wid) is HealthStatus.NOT_READY  # down, but still registered


async def test_without_health_checks_one_good_check_makes_it_ready_for_good() -> None:
    async with Fleet(HealthConfig(**BASE, disable_health_check=True), ok=True) as f:
        wid = await f.add()
        await f.clock.advance(0.1)
        assert f.health(wid) is HealthStatus.READY  # one check, though the threshold is 2
        assert len(f.prober.times) == 1
        f.prober.ok = False
        await f.clock.advance(120.0)
        assert len(f.prober.times) == 1 and f.health(wid) is HealthStatus.READY


async def test_without_health_checks_a_worker_down_at_start_is_checked_until_it_answers() -> None:
    async with Fleet(HealthConfig(**BASE, disable_health_check=True), ok=False) as f:
        wid = await f.add()
        await f.clock.advance(5.0)
        assert f.health(wid) is HealthStatus.NOT_READY and len(f.prober.times) >= 3
        f.prober.ok = True
        await f.clock.advance(3.0)
        assert f.health(wid) is HealthStatus.READY
        calls = len(f.prober.times)
        await f.clock.advance(120.0)
        assert len(f.prober.times) == calls


async def test_a_failed_worker_is_removed_only_with_remove_unhealthy_workers() -> None:
    for remove in (False, True):
        cfg = HealthConfig(**BASE, health_failed_after_secs=20.0, remove_unhealthy_workers=remove)
        async with Fleet(cfg, ok=True) as f:
            wid = await f.add()
            await f.clock.advance(1.0)
            assert f.health(wid) is HealthStatus.READY
            f.prober.ok = False
            await f.clock.advance(15.0)
            assert f.health(wid) is HealthStatus.NOT_READY
            await f.clock.advance(15.0)
            assert f.health(wid) is (None if remove else HealthStatus.FAILED)


def test_startup_values_the_rust_gateway_refuses_stop_the_start() -> None:
    check_health(HealthConfig())
    for bad, flag in (
        ({"worker_startup_timeout_secs": 0}, "--worker-startup-timeout-secs"),
        ({"worker_startup_check_interval": 0}, "--worker-startup-check-interval"),
        ({"worker_startup_delay": -1}, "--worker-startup-delay"),
    ):
        with pytest.raises(ConfigError, match=flag):
            check_health(HealthConfig(**bad))


async def test_a_worker_imported_from_the_mesh_is_left_to_its_owner() -> None:
    """Its removal would reach every node: the node that registered it decides."""
    cfg = HealthConfig(**BASE, worker_startup_timeout_secs=5.0, remove_unhealthy_workers=True)
    async with Fleet(cfg, ok=False) as f:
        snap = await f.registry.ask(AddWorker("http://w:1", imported=True), 1.0)
        await f.clock.advance(400.0)
        assert f.health(snap.worker_id) is HealthStatus.FAILED
