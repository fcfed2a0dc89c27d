"""MeshSyncActor: keeps this node's worker registry in step with the mesh's worker directory, and
brings other nodes' cache summaries to the cache-index actor.

Workers registered here (command line, `POST /workers`) are published to the replicated
directory; workers other nodes published are imported and health-checked locally; a removal
through `DELETE /workers` on any node removes the worker everywhere, and a change through
`PATCH` / `PUT /workers/{id}` (priority, cost, labels...) changes it everywhere: the node that
took it publishes the new spec (a later stamp wins), the others apply what differs from the spec
they last synced (never from their registry's value: a change of their own that is still on its
way to the directory is not undone by the record it is about to replace). A node that dies
leaves its records behind, so the others keep serving its workers.

Everything arrives as events on the bus: `WorkerAdded` / `WorkerRemoved` from the registry (the
ones registered here are announced; the imported ones, which this actor caused, are not), and
`MeshDocumentsChanged` from the mesh node (a peer's update: the directory is reconciled into the
registry, changed cache summaries are published as `CacheHintsImported`). On `Resync` (the bus
dropped some of them) and at start it does all of it from the state: reconcile, import every
changed summary, and announce again what the registry and the directory disagree on.

The directory is a pure core over a replicated document; this actor is its only writer here, and
the only one that turns directory changes into registry asks (with deadlines; the registry never
asks back, so there is no cycle).

Credentials stay on the node that has them: a published spec carries no `api_key`, and an
imported worker gets none from the mesh, so this node calls it with its own `--worker-api-key`.
"""

from __future__ import annotations

from typing import Any

import structlog

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.messages import (
    AddWorker,
    CacheHintsImported,
    MeshDocumentsChanged,
    RemoveWorker,
    Resync,
    UpdateWorker,
    WorkerAdded,
    WorkerRemoved,
    WorkerUpdated,
)
from smg.actors.registry import DuplicateWorker
from smg.actors.runtime import Actor, ActorRef
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.mesh.cache_summary import CacheSummaries, Seen
from smg.mesh.worker_records import HybridClock, WorkerDirectory, public_spec
from smg.pipeline.providers import PROVIDERS

log = structlog.get_logger("smg.mesh_sync")

_ASK_TIMEOUT_S = 10.0
WORKERS, CACHE = "workers", "cache"


def spec_of(worker: WorkerSnapshot) -> dict[str, Any]:
    """What the mesh may learn of a worker: everything but its credentials."""
    spec: dict[str, Any] = {
        "url": worker.url,
        "worker_type": worker.worker_type,
        "model_id": worker.model_id,
        "priority": worker.priority,
        "cost": worker.cost,
        "labels": [list(kv) for kv in worker.labels],
        "bootstrap_port": worker.bootstrap_port,
    }
    if worker.runtime_type is not None:  # an external provider's worker needs both
        spec["runtime_type"] = worker.runtime_type
    if worker.provider is not None:
        spec["provider"] = worker.provider
    return public_spec(spec)


# the spec fields a peer's PATCH / PUT may change here (url is the key; model_id only to a value)
_UPDATABLE = ("worker_type", "model_id", "priority", "cost", "labels", "bootstrap_port")


def spec_changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The `UpdateWorker` changes that turn a worker synced at `before` into `after`."""
    out: list[tuple[str, Any]] = []
    for name in _UPDATABLE:
        value = after.get(name)
        if value == before.get(name) or (name == "model_id" and value is None):
            continue
        if name == "labels":
            value = tuple(tuple(kv) for kv in value or ())
        out.append((name, value))
    return tuple(out)


def add_message(spec: dict[str, Any]) -> AddWorker:
    fields = dict(spec)
    fields["labels"] = tuple(tuple(kv) for kv in fields.get("labels") or ())
    known = AddWorker.__dataclass_fields__
    return AddWorker(**{k: v for k, v in fields.items() if k in known}, imported=True)


class MeshSyncActor(Actor):
    def __init__(
        self,
        *,
        directory: WorkerDirectory,
        hlc: HybridClock,
        registry: ActorRef,
        registry_cell: SnapshotCell[RegistrySnapshot],
        events: EventBus,
        summaries: CacheSummaries | None = None,
    ) -> None:
        """`summaries`: the cache document, when this node routes cache-aware."""
        super().__init__()
        self.directory = directory
        self.hlc = hlc
        self.registry = registry
        self.registry_cell = registry_cell
        self.events = events
        self.summaries = summaries
        self.imported: set[str] = set()  # urls this node imported from the directory
        self.announced: set[str] = set()  # urls this node published as added
        self.synced: dict[str, dict[str, Any]] = {}  # url -> the directory's spec last applied
        self._seen_summaries = Seen()  # summary key -> the bytes last imported

    async def on_start(self) -> None:
        types = (WorkerAdded, WorkerRemoved, WorkerUpdated, MeshDocumentsChanged)
        self.events.subscribe(self.ref, types, Delivery.RESYNC)
        self.ref.tell(Resync())  # whatever changed before this incarnation ran

    async def handle(self, message: Any) -> Any:
        match message:
            case WorkerAdded(worker=w, imported=False) | WorkerUpdated(worker=w, imported=False):
                self._publish(w)
                self.imported.discard(w.url)
                self.announced.add(w.url)
            case WorkerRemoved(worker=w, imported=False):
                self.directory.publish_remove(w.url, self.hlc.now())
                self.imported.discard(w.url)
                self.announced.discard(w.url)
                self.synced.pop(w.url, None)
            case WorkerAdded() | WorkerRemoved() | WorkerUpdated():
                pass  # imported, removed or changed by this actor: the directory already says so
            case MeshDocumentsChanged(namespaces=namespaces):
                if CACHE in namespaces:
                    self._import_hints()
                if WORKERS in namespaces:
                    await self._reconcile()
            case Resync():
                self._import_hints()
                self._announce_missed()
                await self._reconcile()
            case _:
                raise TypeError(f"MeshSyncActor: unexpected message {message!r}")
        return None

    def _publish(self, w: WorkerSnapshot) -> None:
        self.directory.publish_add(w.url, spec_of(w), self.hlc.now())
        spec = self.directory.effective().get(w.url)
        if spec is not None:
            self.synced[w.url] = spec

    async def _reconcile(self) -> None:
        wanted = self.directory.effective()
        removed = self.directory.removed()
        present = {w.url: w for w in self.registry_cell.value.workers}
        for url, spec in wanted.items():
            if url in present:
                await self._apply_change(present[url], spec)
                continue
            if spec.get("provider", "openai") not in PROVIDERS:  # from a newer node, perhaps
                log.warning("mesh_import_failed", url=url, error="unknown provider")
                continue
            try:
                await self.registry.ask(add_message(spec), _ASK_TIMEOUT_S)
            except DuplicateWorker:
                continue
            except Exception as exc:  # a bad record must not stop the others from importing
                log.warning("mesh_import_failed", url=url, error=repr(exc))
                continue
            self.imported.add(url)
            self.synced[url] = spec
            log.info("mesh_worker_imported", url=url)
        for url in removed:
            w = present.get(url)
            if w is None:
                continue
            await self.registry.ask(RemoveWorker(w.worker_id, imported=True), _ASK_TIMEOUT_S)
            self.imported.discard(url)
            self.announced.discard(url)
            self.synced.pop(url, None)
            log.info("mesh_worker_removed", url=url)

    async def _apply_change(self, w: WorkerSnapshot, spec: dict[str, Any]) -> None:
        """A peer's PATCH / PUT of a worker this node has: what changed since the last sync."""
        before = self.synced.get(w.url)
        self.synced[w.url] = spec
        changes = spec_changes(before, spec) if before is not None else ()
        if not changes:
            return
        msg = UpdateWorker(w.worker_id, changes, imported=True)
        try:
            await self.registry.ask(msg, _ASK_TIMEOUT_S)
        except Exception as exc:  # the worker's actor restarting: the next change retries
            log.warning("mesh_update_failed", url=w.url, error=repr(exc))
            return
        log.info("mesh_worker_updated", url=w.url, fields=[name for name, _ in changes])

    def _announce_missed(self) -> None:
        """Announcements lost with dropped events: a worker registered here that the directory
        has no record of is published, and so is one changed here since its last sync; one
        announced here that has left the registry while the
        directory still serves it is published as removed."""
        latest = self.directory.latest()
        present = {w.url: w for w in self.registry_cell.value.workers}
        for url, w in present.items():
            if url not in self.imported and url not in latest:
                self._publish(w)
                self.announced.add(url)
            elif url in self.synced and spec_changes(self.synced[url], spec_of(w)):
                self._publish(w)  # a change made here whose WorkerUpdated was dropped
                self.announced.add(url)
        for url in [u for u in self.announced if u not in present]:
            rec = latest.get(url)
            if rec is not None and rec.action == "add":
                self.directory.publish_remove(url, self.hlc.now())
            self.announced.discard(url)

    def _import_hints(self) -> None:
        """Other nodes' cache summaries that changed, by worker id, for the cache-index actor."""
        if self.summaries is None:
            return
        by_url = {w.url: w.worker_id for w in self.registry_cell.value.workers}
        hints = tuple(
            (by_url[url], tuple(hashes))
            for url, hashes in self.summaries.changed(self._seen_summaries)
            if url in by_url
        )
        if hints:
            self.events.publish(CacheHintsImported(hints))
