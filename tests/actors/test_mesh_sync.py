"""MeshSyncActor on the event bus, with a real registry, on a fake clock (no sockets): what this
node registers is announced, what a peer's directory holds is imported (and not announced back),
a PATCH / PUT on either side reaches the other, and a Resync announces what dropped events left
out."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from support.event_log import registry_spec

from smg.actors.event_bus import EventBus
from smg.actors.mesh_sync import MeshSyncActor
from smg.actors.messages import (
    AddWorker,
    MeshDocumentsChanged,
    RemoveWorker,
    Resync,
    UpdateWorker,
)
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.clock import FakeClock, settle
from smg.core.health import ProbeResult
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.mesh.identity import NodeIdentity
from smg.mesh.replica import Replica
from smg.mesh.worker_records import HybridClock, WorkerDirectory

WALL = 1_795_000_000.0


async def probe(worker: WorkerSnapshot) -> ProbeResult:
    return ProbeResult(ok=True, model_id="m")


def directory(name: str) -> WorkerDirectory:
    replica = Replica("workers", NodeIdentity.generate(f"{name}@1", random.Random(name)))
    return WorkerDirectory(replica, replica.owner, clock=HybridClock(lambda: WALL, replica.owner))


@dataclass
class Node:
    bus: EventBus
    cell: SnapshotCell[RegistrySnapshot]
    registry: ActorRef
    sync: ActorRef
    directory: WorkerDirectory

    def urls(self) -> set[str]:
        return {w.url for w in self.cell.value.workers}

    def owner_of(self, url: str) -> tuple[str, str]:
        rec = self.directory.latest()[url]
        return rec.owner, rec.action


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    clock = FakeClock()
    bus = EventBus()
    cell: SnapshotCell[RegistrySnapshot] = SnapshotCell(RegistrySnapshot())
    own = directory("n1")
    async with (
        Supervisor("workers", clock=clock) as wsup,
        Supervisor("core", clock=clock) as core,
    ):
        registry = await core.start_child(registry_spec(cell, wsup, probe, bus))
        sync = await core.start_child(
            ChildSpec(
                "mesh_sync",
                lambda: MeshSyncActor(
                    directory=own,
                    hlc=own.clock,  # type: ignore[arg-type]
                    registry=registry,
                    registry_cell=cell,
                    events=bus,
                ),
            )
        )
        await settle()
        yield Node(bus, cell, registry, sync, own)
        bus.close()


def from_peer(node: Node, peer: WorkerDirectory) -> None:
    """A peer's update arrives (what the mesh node does), then its notice on the bus."""
    replica = node.directory.replica
    update = peer.replica.diff(replica.state_vector())
    assert update is not None
    replica.apply(update)
    node.bus.publish(MeshDocumentsChanged(frozenset({"workers"})))


async def test_registered_here_is_announced_and_removed_here_is_withdrawn(node: Node) -> None:
    snap = await node.registry.ask(AddWorker("http://a:1", model_id="m"), 5.0)
    await settle()
    assert node.owner_of("http://a:1") == (node.directory.node_id, "add")
    assert node.directory.effective()["http://a:1"]["model_id"] == "m"
    await node.registry.ask(RemoveWorker(snap.worker_id), 5.0)
    await settle()
    assert node.owner_of("http://a:1") == (node.directory.node_id, "remove")


async def test_a_peers_worker_is_imported_and_not_announced_back(node: Node) -> None:
    peer = directory("n2")
    peer.publish_add("http://b:1", {"url": "http://b:1", "model_id": "m"}, (1, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    assert node.urls() == {"http://b:1"}
    assert node.owner_of("http://b:1") == (peer.node_id, "add")  # no record of ours
    assert not [r for r in node.directory.records() if r.owner == node.directory.node_id]
    peer.publish_remove("http://b:1", (2, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    assert node.urls() == set()
    assert node.owner_of("http://b:1") == (peer.node_id, "remove")


async def test_a_resync_announces_what_the_dropped_events_carried(node: Node) -> None:
    node.bus.unsubscribe(node.sync)  # as if its mailbox had been full
    kept = await node.registry.ask(AddWorker("http://c:1"), 5.0)
    gone = await node.registry.ask(AddWorker("http://d:1"), 5.0)
    await settle()
    assert node.directory.latest() == {}  # it heard nothing
    node.sync.tell_control(Resync())
    await settle()
    assert node.owner_of("http://c:1") == (node.directory.node_id, "add")
    assert node.owner_of("http://d:1") == (node.directory.node_id, "add")
    await node.registry.ask(RemoveWorker(gone.worker_id), 5.0)  # heard of nothing again
    node.sync.tell_control(Resync())
    await settle()
    assert node.owner_of("http://d:1") == (node.directory.node_id, "remove")
    assert node.owner_of("http://c:1")[1] == "add" and kept.url in node.urls()


def worker(node: Node, url: str) -> WorkerSnapshot:
    return next(w for w in node.cell.value.workers if w.url == url)


async def test_a_change_made_here_is_published_with_a_later_stamp(node: Node) -> None:
    snap = await node.registry.ask(AddWorker("http://e:1", model_id="m"), 5.0)
    await settle()
    first = node.directory.latest()["http://e:1"].ts
    change = (("priority", 7), ("labels", (("tier", "gold"),)), ("api_key", "sk-never-shared"))
    await node.registry.ask(UpdateWorker(snap.worker_id, change), 5.0)
    await settle()
    rec = node.directory.latest()["http://e:1"]
    assert rec.action == "add" and rec.ts > first
    spec = node.directory.effective()["http://e:1"]
    assert spec["priority"] == 7 and [list(kv) for kv in spec["labels"]] == [["tier", "gold"]]
    assert "api_key" not in spec and "sk-never-shared" not in repr(node.directory.records())


async def test_a_peers_change_is_applied_here_and_not_announced_back(node: Node) -> None:
    peer = directory("n2")
    spec = {"url": "http://f:1", "model_id": "m", "priority": 50, "cost": 1.0}
    peer.publish_add("http://f:1", spec, (1, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    assert worker(node, "http://f:1").priority == 50
    changed = {**spec, "priority": 3, "cost": 2.5, "labels": [["zone", "b"]]}
    peer.publish_add("http://f:1", changed, (2, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    w = worker(node, "http://f:1")
    assert (w.priority, w.cost, w.labels) == (3, 2.5, (("zone", "b"),))
    assert not [r for r in node.directory.records() if r.owner == node.directory.node_id]


async def test_a_change_here_is_not_undone_by_the_record_it_is_about_to_replace(
    node: Node,
) -> None:
    peer = directory("n2")
    spec = {"url": "http://g:1", "model_id": "m", "priority": 50}
    peer.publish_add("http://g:1", spec, (1, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    w = worker(node, "http://g:1")
    node.bus.unsubscribe(node.sync)  # the change's WorkerUpdated is lost (a full mailbox)
    await node.registry.ask(UpdateWorker(w.worker_id, (("priority", 9),)), 5.0)
    # the directory still holds the peer's record (priority 50) when a document change comes in
    node.sync.tell(MeshDocumentsChanged(frozenset({"workers"})))
    await settle()
    assert worker(node, "http://g:1").priority == 9
    node.sync.tell_control(Resync())  # what the bus sends after dropping events
    await settle()
    assert node.owner_of("http://g:1") == (node.directory.node_id, "add")
    assert node.directory.effective()["http://g:1"]["priority"] == 9


async def test_a_provider_worker_is_published_and_imported_as_one(node: Node) -> None:
    add = AddWorker("http://p:1", model_id="m", runtime_type="external", provider="anthropic")
    await node.registry.ask(add, 5.0)
    await settle()
    spec = node.directory.effective()["http://p:1"]
    assert (spec["runtime_type"], spec["provider"]) == ("external", "anthropic")
    peer = directory("n2")
    mine = {"url": "http://q:1", "model_id": "g", "runtime_type": "external", "provider": "gemini"}
    peer.publish_add("http://q:1", mine, (1, 0, peer.node_id))
    odd = {"url": "http://r:1", "runtime_type": "external", "provider": "someday"}
    peer.publish_add("http://r:1", odd, (1, 0, peer.node_id))
    from_peer(node, peer)
    await settle()
    imported = worker(node, "http://q:1")
    assert (imported.runtime_type, imported.provider) == ("external", "gemini")
    assert "http://r:1" not in node.urls()  # a provider this node does not know is not imported
