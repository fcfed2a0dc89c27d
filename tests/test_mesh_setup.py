"""How a gateway joins the mesh: node ids whose epochs order restarts, seed parsing."""

from __future__ import annotations

import random

from smg.api.mesh_setup import GatewayMesh, boot_epoch, seed_addrs
from smg.clock import FakeClock
from smg.config import GatewayConfig, MeshNodeConfig, replace_path
from smg.mesh.config import MeshConfig
from smg.mesh.membership import Membership, epoch_of
from smg.mesh.messages import Alive
from smg.mesh.replica import Replica
from smg.mesh.worker_records import WorkerDirectory


def mesh_at(wall_s: float) -> GatewayMesh:
    cfg = replace_path(
        GatewayConfig(), "mesh", enable_mesh=True, mesh_host="127.0.0.7", mesh_port=39527
    )
    return GatewayMesh(cfg, FakeClock(), random.Random(0), wall=lambda: wall_s)


def test_a_restart_gets_a_newer_epoch_that_replaces_its_past_life() -> None:
    first, second = mesh_at(1_795_000_000.123), mesh_at(1_795_000_007.5)
    assert first.node_id == "127.0.0.7-39527@1795000000123"
    assert epoch_of(second.node_id) > epoch_of(first.node_id)
    peer = Membership("peer@1", "127.0.0.8:39527", MeshConfig.test(), random.Random(0))
    peer.merge(0.0, (Alive(first.node_id, "127.0.0.7:39527", 3),))
    peer.merge(1.0, (Alive(second.node_id, "127.0.0.7:39527", 0),))
    assert set(peer.members()) == {"peer@1", second.node_id}  # the past life is gone at once
    peer.merge(2.0, (Alive(first.node_id, "127.0.0.7:39527", 9),))  # stale gossip of it
    assert set(peer.members()) == {"peer@1", second.node_id}


def test_boot_epoch_is_wall_milliseconds() -> None:
    assert boot_epoch(lambda: 12.3456) == 12345


def test_seed_addresses_accept_commas_spaces_schemes_and_default_port() -> None:
    cfg = MeshNodeConfig(mesh_peer_urls=("10.0.0.1:4000,10.0.0.2", "http://h3:5/ h4"))
    assert seed_addrs(cfg) == ["10.0.0.1:4000", "10.0.0.2:39527", "h3:5", "h4:39527"]


def test_compaction_bounds_tombstones_and_keeps_live_items() -> None:
    mesh = mesh_at(1_795_000_000.0)
    cache = mesh.replicas["cache"]
    for round_ in range(40):  # interleaved overwrites of many keys: tombstones that never merge
        for i in range(200):
            cache.put(f"c/http://w{i}", [f"prefix {round_}"])
    before = cache.stats()
    assert before["tombstone_bytes"] > 64 * 1024
    assert mesh.compact_if_needed() == ["cache"]
    after = cache.stats()
    assert after["generation"] == 1 and after["tombstone_bytes"] < 1024
    assert cache.get(f"{mesh.node_id}/c/http://w7") == ["prefix 39"]
    assert mesh.compact_if_needed() == []  # nothing left to gain


def test_compaction_keeps_a_dead_nodes_workers_served() -> None:
    mesh = mesh_at(1_795_000_000.0)
    mesh.compact_min_tombstone_bytes = 0
    dead = Replica("workers", "dead@1", random.Random(5))
    WorkerDirectory(dead, "dead@1").publish_add(
        "http://gone-node-worker:8000", {"url": "http://gone-node-worker:8000"}, (1, 0, "dead@1")
    )
    workers = mesh.replicas["workers"]
    workers.apply(dead.diff(workers.state_vector()))
    for i in range(3000):  # churn of our own records
        mesh.directory.publish_add(
            f"http://w{i % 30}", {"url": f"http://w{i % 30}"}, (2 + i, 0, mesh.node_id)
        )
    assert "http://gone-node-worker:8000" in mesh.directory.effective()
    assert mesh.compact_if_needed() == ["workers"]  # "dead@1" is not a live member
    mesh.compact_if_needed()  # releases the previous generation (its owner is not live)
    assert workers.previous_owners() == set()
    assert "http://gone-node-worker:8000" in mesh.directory.effective()
