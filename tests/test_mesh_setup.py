"""How a gateway joins the mesh: node ids whose epochs order restarts, seed parsing."""

from __future__ import annotations

import random

from smg.api.mesh_setup import GatewayMesh, boot_epoch, seed_addrs
from smg.clock import FakeClock
from smg.config import GatewayConfig, MeshNodeConfig, replace_path
from smg.mesh.config import MeshConfig
from smg.mesh.membership import Membership, epoch_of
from smg.mesh.messages import Alive


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
