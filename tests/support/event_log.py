"""Helpers for tests of the actors' events: an actor that keeps every message it is told (a
subscriber to watch the event bus with), a worker snapshot to put in events, and the registry
(the lifecycle's publisher) as a supervisor's child."""

from __future__ import annotations

from typing import Any

from smg.actors.event_bus import EventBus
from smg.actors.registry import RegistryActor
from smg.actors.runtime import Actor
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.worker import Prober, initial_snapshot
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot


class EventLog(Actor):
    def __init__(self, into: list[Any]) -> None:
        super().__init__()
        self.into = into

    async def handle(self, message: Any) -> Any:
        self.into.append(message)
        return None


def worker_snapshot(worker_id: str, model_id: str | None = "m", url: str = "") -> WorkerSnapshot:
    """A registered worker's first snapshot (pending), at `http://<worker_id>:8000` by default."""
    return initial_snapshot(
        worker_id,
        url or f"http://{worker_id}:8000",
        model_id=model_id,
        worker_type="regular",
        api_key=None,
        breaker=CircuitBreaker(CircuitBreakerConfig()),
    )


def registry_spec(
    cell: SnapshotCell[RegistrySnapshot],
    workers: Supervisor,
    prober: Prober,
    events: EventBus,
    health: HealthConfig | None = None,
    breaker: CircuitBreakerConfig | None = None,
) -> ChildSpec:
    return ChildSpec(
        "registry",
        lambda: RegistryActor(
            cell=cell,
            workers_sup=workers,
            prober=prober,
            health_cfg=health or HealthConfig(),
            breaker_cfg=breaker or CircuitBreakerConfig(),
            events=events,
        ),
    )
