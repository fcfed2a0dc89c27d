"""RegistryActor: the set of workers. Starts and stops WorkerActors, publishes `RegistrySnapshot`.

Adding a worker starts its actor under the workers' supervisor (one_for_one: a crashed worker
actor restarts alone); removing it stops the actor and republishes. The hot path only ever reads
`cell.value`.

It is also where the worker lifecycle becomes events (`smg.actors.messages`), published on the
`EventBus` after the snapshot that shows them: `WorkerAdded` and `WorkerRemoved`, and, from
comparing each snapshot a worker actor sends with the one before, `WorkerModelChanged`,
`WorkerHealthChanged` and `WorkerBreakerChanged`. One publisher, one mailbox: a worker's events
come out in the order they happened, its removal last.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from smg.actors.event_bus import EventBus
from smg.actors.messages import (
    AddWorker,
    ReleaseEngine,
    RemoveWorker,
    UpdateWorker,
    WorkerAdded,
    WorkerBreakerChanged,
    WorkerChanged,
    WorkerHealthChanged,
    WorkerModelChanged,
    WorkerRemoved,
    WorkerUpdated,
)
from smg.actors.runtime import Actor, ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.worker import Prober, WorkerActor, initial_snapshot
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core import dp
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot

log = structlog.get_logger("smg.registry")

_UPDATE_ASK_TIMEOUT_S = 5.0
_RELEASE_TIMEOUT_S = 5.0  # closing a removed engine's connection


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
        events: EventBus | None = None,
        dp_aware: bool = False,
        release_engine: Callable[[str], Awaitable[None]] | None = None,
        release_grace_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.cell = cell
        self.workers_sup = workers_sup
        self.prober = prober
        self.health_cfg = health_cfg
        self.breaker_cfg = breaker_cfg
        self.events = events if events is not None else EventBus()
        self.workers: dict[str, WorkerSnapshot] = {w.worker_id: w for w in cell.value.workers}
        self.refs: dict[str, ActorRef] = {}
        self.dp_aware = dp_aware  # an engine of N data-parallel ranks becomes N workers
        # called with an engine's URL once no worker is left on it (its connection is closed),
        # `release_grace_s` later (the requests still running on it may finish)
        self.release_engine = release_engine
        self.release_grace_s = release_grace_s

    async def handle(self, message: Any) -> Any:
        match message:
            case WorkerChanged(snapshot=snap):
                before = self.workers.get(snap.worker_id)
                if before is not None:
                    if self.dp_aware and dp.expands(snap.url, snap.dp_size):
                        await self._expand(snap)
                        return None
                    self.workers[snap.worker_id] = snap
                    self._publish()
                    self._announce_changes(before, snap)
                return None
            case AddWorker():
                return await self._add(message)
            case RemoveWorker(worker_id=worker_id, imported=imported):
                return await self._remove(worker_id, imported)
            case UpdateWorker():
                return await self._update(message)
            case ReleaseEngine(engine_url=engine):
                await self._release_if_unused(engine)
                return None
            case _:
                raise TypeError(f"RegistryActor: unexpected message {message!r}")

    def worker_ref(self, worker_id: str) -> ActorRef | None:
        return self.refs.get(worker_id)

    async def _add(self, msg: AddWorker) -> WorkerSnapshot:
        url = normalize_url(msg.url)
        for w in self.workers.values():
            if url in (w.url, dp.engine_url(w.url)):  # an engine expanded into ranks: its own
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
            runtime_type=msg.runtime_type,
            provider=msg.provider,
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
                may_remove_itself=not msg.imported,  # the mesh owner decides on its workers
            )

        self.refs[worker_id] = await self.workers_sup.start_child(
            ChildSpec(f"worker:{worker_id}", factory)
        )
        log.info("worker_added", worker=url, worker_id=worker_id)
        self.events.publish(WorkerAdded(snap, msg.imported))
        return snap

    async def _expand(self, snap: WorkerSnapshot) -> None:
        """`--dp-aware`: a worker whose engine reported N > 1 data-parallel ranks is replaced
        by N workers `url@rank`, registered as it was (they probe the same engine)."""
        assert snap.dp_size is not None
        await self._remove(snap.worker_id, False, expanding=True)
        log.info("worker_dp_expanded", worker=snap.url, dp_size=snap.dp_size)
        for url in dp.rank_urls(snap.url, snap.dp_size):
            try:
                await self._add(
                    AddWorker(
                        url,
                        api_key=snap.api_key,
                        worker_type=snap.worker_type,
                        model_id=snap.model_id,
                        priority=snap.priority,
                        cost=snap.cost,
                        labels=snap.labels,
                        bootstrap_port=snap.bootstrap_port,
                        runtime_type=snap.runtime_type,
                    )
                )
            except DuplicateWorker:  # registered by hand already: keep that one
                continue

    async def _remove(
        self, worker_id: str, imported: bool, expanding: bool = False
    ) -> WorkerSnapshot | None:
        """Stop the worker's actor and drop it; the last worker of an engine (a rank worker's:
        of all its ranks) releases the engine's connection `release_grace_s` later, unless it is
        being expanded or a worker on that engine is registered again meanwhile."""
        snap = self.workers.pop(worker_id, None)
        if snap is None:
            return None
        self.refs.pop(worker_id, None)
        await self.workers_sup.stop_child(f"worker:{worker_id}")
        self._publish()
        log.info("worker_removed", worker=snap.url, worker_id=worker_id)
        self.events.publish(WorkerRemoved(snap, imported))
        if not expanding and self.release_engine is not None:
            engine = dp.engine_url(snap.url)
            if self.release_grace_s > 0:
                self.tell_later(self.release_grace_s, ReleaseEngine(engine))
            else:
                await self._release_if_unused(engine)
        return snap

    async def _release_if_unused(self, engine: str) -> None:
        """Close the engine's connection unless a worker on it is registered (again)."""
        if self.release_engine is None:
            return
        if any(dp.engine_url(w.url) == engine for w in self.workers.values()):
            return
        try:
            async with asyncio.timeout(_RELEASE_TIMEOUT_S):
                await self.release_engine(engine)
        except Exception as exc:  # a connection that fails to close is gone all the same
            log.warning("engine_release_failed", engine=engine, error=repr(exc))

    async def _update(self, msg: UpdateWorker) -> WorkerSnapshot | None:
        """The worker's actor owns its snapshot: it applies the change and answers the new one,
        published here at once so the caller's next read sees it."""
        before = self.workers.get(msg.worker_id)
        ref = self.refs.get(msg.worker_id)
        if before is None or ref is None:
            return None
        snap: WorkerSnapshot = await ref.ask(msg, _UPDATE_ASK_TIMEOUT_S)
        self.workers[msg.worker_id] = snap
        self._publish()
        self._announce_changes(before, snap)
        log.info("worker_updated", worker=snap.url, worker_id=msg.worker_id, mesh=msg.imported)
        self.events.publish(WorkerUpdated(snap, msg.imported))
        return snap

    def _announce_changes(self, before: WorkerSnapshot, after: WorkerSnapshot) -> None:
        """The events one new snapshot of a worker stands for (most snapshots: none)."""
        publish = self.events.publish
        if after.model_id is not None and after.model_id != before.model_id:
            publish(WorkerModelChanged(after, after.model_id))
        if after.health is not before.health:
            publish(WorkerHealthChanged(after, after.health))
        if after.breaker.state is not before.breaker.state:
            publish(WorkerBreakerChanged(after, after.breaker.state))

    def _publish(self) -> None:
        self.cell.publish(RegistrySnapshot.build(tuple(self.workers.values())))
