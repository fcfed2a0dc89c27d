"""UpdateWorker (PATCH / PUT /workers/{id}) through the registry and the worker's own actor, and
the runtime a probe reports, in simulated time: a change survives the probes that follow it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from support.event_log import registry_spec

from smg.actors.event_bus import EventBus
from smg.actors.messages import AddWorker, UpdateWorker
from smg.actors.supervisor import Supervisor
from smg.clock import FakeClock
from smg.config import HealthConfig
from smg.core.health import HealthStatus, ProbeResult
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot

HEALTH_INTERVAL_S = 10.0
HEALTH = HealthConfig(health_success_threshold=1, health_check_interval_secs=HEALTH_INTERVAL_S)


class KeyRecordingProber:
    """Always healthy, serving "m" on `runtime`; remembers the api_key each probe carried."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self.keys_seen: list[str | None] = []

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        self.keys_seen.append(worker.api_key)
        return ProbeResult(ok=True, model_id="m", runtime=self.runtime)


@contextlib.asynccontextmanager
async def started(
    clock: FakeClock, runtime: str
) -> AsyncIterator[tuple[SnapshotCell[RegistrySnapshot], Any, KeyRecordingProber]]:
    cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
    prober = KeyRecordingProber(runtime)
    async with (
        Supervisor("workers", clock=clock) as wsup,
        Supervisor("core", clock=clock) as core,
    ):
        registry = await core.start_child(registry_spec(cell, wsup, prober, EventBus(), HEALTH))
        yield cell, registry, prober


async def test_update_is_published_at_once_and_outlives_later_probes() -> None:
    clock = FakeClock()
    async with started(clock, runtime="vllm") as (cell, registry, prober):
        add = AddWorker("http://w:1", api_key="old-key")
        assert "old-key" not in repr(add)  # messages may be logged: keys stay out of them
        snap = await registry.ask(add, 1.0)
        await clock.advance(1.0)
        assert cell.value.by_id[snap.worker_id].health is HealthStatus.READY
        assert cell.value.by_id[snap.worker_id].runtime_type == "vllm"  # from the probe

        changes = (("priority", 7), ("labels", (("tier", "gold"),)), ("api_key", "new-key"))
        msg = UpdateWorker(snap.worker_id, changes)
        assert "new-key" not in repr(msg)
        updated = await registry.ask(msg, 1.0)
        assert updated.priority == 7 and updated.api_key == "new-key"
        assert cell.value.by_id[snap.worker_id] == updated  # the caller's next read sees it

        await clock.advance(3 * HEALTH_INTERVAL_S)  # probes and republishing since
        w = cell.value.by_id[snap.worker_id]
        assert (w.priority, w.labels, w.api_key) == (7, (("tier", "gold"),), "new-key")
        assert w.health is HealthStatus.READY and w.runtime_type == "vllm"
        assert prober.keys_seen[-1] == "new-key"  # the probes use the new key


async def test_given_runtime_wins_over_the_probe_and_unknown_worker_is_none() -> None:
    clock = FakeClock()
    async with started(clock, runtime="vllm") as (cell, registry, _):
        snap = await registry.ask(AddWorker("http://w:2", runtime_type="trtllm"), 1.0)
        await clock.advance(1.0)
        assert cell.value.by_id[snap.worker_id].runtime_type == "trtllm"
        assert await registry.ask(UpdateWorker("no-such-worker", (("priority", 1),)), 1.0) is None
