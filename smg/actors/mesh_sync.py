"""MeshSyncActor: keeps this node's worker registry in step with the mesh's worker directory.

Workers registered here (command line, `POST /workers`) are published to the replicated
directory; workers other nodes published are imported and health-checked locally; a removal
through `DELETE /workers` on any node removes the worker everywhere. A node that dies leaves its
records behind, so the others keep serving its workers.

The directory is a pure core over a replicated document; this actor is its only writer here, and
the only one that turns directory changes into registry asks (with deadlines; the registry never
asks back, so there is no cycle).

Credentials stay on the node that has them: a published spec carries no `api_key`, and an
imported worker gets none from the mesh, so this node calls it with its own `--worker-api-key`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import structlog

from smg.actors.messages import AddWorker, RemoveWorker
from smg.actors.registry import DuplicateWorker
from smg.actors.runtime import Actor, ActorRef
from smg.core.snapshots import RegistrySnapshot, SnapshotCell
from smg.mesh.worker_records import HybridClock, WorkerDirectory, public_spec

log = structlog.get_logger("smg.mesh_sync")

_ASK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class DirectoryChanged:
    """The replicated worker directory changed (a peer's update arrived)."""


@dataclass(frozen=True, slots=True)
class Announce:
    """A worker was added (`spec` set) or removed through this node's API or command line."""

    url: str
    spec: dict[str, Any] | None


def spec_of(msg: AddWorker, url: str) -> dict[str, Any]:
    """What the mesh may learn of a worker: everything but its credentials."""
    spec = public_spec(asdict(msg))
    spec["url"] = url
    spec["labels"] = [list(kv) for kv in msg.labels]
    return spec


def add_message(spec: dict[str, Any]) -> AddWorker:
    fields = dict(spec)
    fields["labels"] = tuple(tuple(kv) for kv in fields.get("labels") or ())
    known = AddWorker.__dataclass_fields__
    return AddWorker(**{k: v for k, v in fields.items() if k in known})


class MeshSyncActor(Actor):
    def __init__(
        self,
        *,
        directory: WorkerDirectory,
        hlc: HybridClock,
        registry: ActorRef,
        registry_cell: SnapshotCell[RegistrySnapshot],
    ) -> None:
        super().__init__()
        self.directory = directory
        self.hlc = hlc
        self.registry = registry
        self.registry_cell = registry_cell
        self.imported: set[str] = set()

    async def on_start(self) -> None:
        self.ref.tell(DirectoryChanged())

    async def handle(self, message: Any) -> Any:
        match message:
            case Announce(url, spec):
                if spec is None:
                    self.directory.publish_remove(url, self.hlc.now())
                else:
                    self.directory.publish_add(url, spec, self.hlc.now())
                self.imported.discard(url)
            case DirectoryChanged():
                await self._reconcile()
            case _:
                raise TypeError(f"MeshSyncActor: unexpected message {message!r}")
        return None

    async def _reconcile(self) -> None:
        wanted = self.directory.effective()
        removed = self.directory.removed()
        present = {w.url: w for w in self.registry_cell.value.workers}
        for url, spec in wanted.items():
            if url in present:
                continue
            try:
                await self.registry.ask(add_message(spec), _ASK_TIMEOUT_S)
            except DuplicateWorker:
                continue
            except Exception as exc:  # a bad record must not stop the others from importing
                log.warning("mesh_import_failed", url=url, error=repr(exc))
                continue
            self.imported.add(url)
            log.info("mesh_worker_imported", url=url)
        for url in removed:
            w = present.get(url)
            if w is None:
                continue
            await self.registry.ask(RemoveWorker(w.worker_id), _ASK_TIMEOUT_S)
            self.imported.discard(url)
            log.info("mesh_worker_removed", url=url)
