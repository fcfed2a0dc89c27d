"""RegistryActor: the set of workers. Starts and stops WorkerActors, publishes `RegistrySnapshot`.

Adding a worker starts its actor under the workers' supervisor (one_for_one: a crashed worker
actor restarts alone); removing it stops the actor, tells the routing state to forget it and
republishes. The hot path only ever reads `cell.value`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import structlog

from smg.actors.messages import AddWorker, RemoveWorker, WorkerChanged
from smg.actors.runtime import Actor, ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.worker import Prober, WorkerActor, initial_snapshot
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot

log = structlog.get_logger("smg.registry")


class DuplicateWorker(Exception):
    def __init__(self, worker_id: str) -> None:
        super().__init__(worker_id)
        self.worker_id = worker_id


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


class RegistryActor(Actor):
    def __init__(
        self,
        *,
        cell: SnapshotCell[RegistrySnapshot],
        workers_sup: Supervisor,
        prober: Prober,
        health_cfg: HealthConfig,
        breaker_cfg: CircuitBreakerConfig,
        on_removed: Callable[[WorkerSnapshot], None] | None = None,
        on_transition: Callable[[WorkerSnapshot, str, Any], None] | None = None,
    ) -> None:
        super().__init__()
        self.cell = cell
        self.workers_sup = workers_sup
        self.prober = prober
        self.health_cfg = health_cfg
        self.breaker_cfg = breaker_cfg
        self.on_removed = on_removed
        self.on_transition = on_transition
        self.workers: dict[str, WorkerSnapshot] = {w.worker_id: w for w in cell.value.workers}
        self.refs: dict[str, ActorRef] = {}

    async def handle(self, message: Any) -> Any:
        match message:
            case WorkerChanged(snapshot=snap):
                if snap.worker_id in self.workers:
                    self.workers[snap.worker_id] = snap
                    self._publish()
                return None
            case AddWorker():
                return await self._add(message)
            case RemoveWorker(worker_id=worker_id):
                return await self._remove(worker_id)
            case _:
                raise TypeError(f"RegistryActor: unexpected message {message!r}")

    def worker_ref(self, worker_id: str) -> ActorRef | None:
        return self.refs.get(worker_id)

    async def _add(self, msg: AddWorker) -> WorkerSnapshot:
        url = normalize_url(msg.url)
        for w in self.workers.values():
            if w.url == url:
                raise DuplicateWorker(w.worker_id)
        worker_id = str(uuid.uuid4())
        snap = initial_snapshot(
            worker_id,
            url,
            model_id=msg.model_id,
            worker_type=msg.worker_type,
            api_key=msg.api_key,
            breaker=CircuitBreaker(self.breaker_cfg),
            priority=msg.priority,
            cost=msg.cost,
            labels=msg.labels,
            bootstrap_port=msg.bootstrap_port,
        )
        self.workers[worker_id] = snap
        self._publish()

        def factory() -> WorkerActor:
            # a restarted worker actor resumes from the last published snapshot
            return WorkerActor(
                self.workers.get(worker_id, snap),
                registry=self.ref,
                prober=self.prober,
                health_cfg=self.health_cfg,
                breaker_cfg=self.breaker_cfg,
                on_transition=self.on_transition,
            )

        self.refs[worker_id] = await self.workers_sup.start_child(
            ChildSpec(f"worker:{worker_id}", factory)
        )
        log.info("worker_added", worker=url, worker_id=worker_id)
        return snap

    async def _remove(self, worker_id: str) -> WorkerSnapshot | None:
        snap = self.workers.pop(worker_id, None)
        if snap is None:
            return None
        self.refs.pop(worker_id, None)
        await self.workers_sup.stop_child(f"worker:{worker_id}")
        self._publish()
        if self.on_removed is not None:
            self.on_removed(snap)
        log.info("worker_removed", worker=snap.url, worker_id=worker_id)
        return snap

    def _publish(self) -> None:
        self.cell.publish(RegistrySnapshot.build(tuple(self.workers.values())))
