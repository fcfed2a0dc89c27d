"""How a gateway joins the mesh: node ids whose epochs order restarts, seed parsing."""

from __future__ import annotations

import random

import pytest

from smg.app.mesh import GatewayMesh, boot_epoch, mesh_keyring, resolve_seeds
from smg.clock import FakeClock
from smg.config import ConfigError, GatewayConfig, MeshNodeConfig, replace_path
from smg.config.mesh_node import seed_addrs
from smg.mesh.config import MeshConfig
from smg.mesh.identity import NodeIdentity, fingerprint, fingerprint_of
from smg.mesh.keyring import Keyring
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
    # name@epoch.fingerprint: the fingerprint names this boot's signing key
    assert first.node_id.startswith("127.0.0.7-39527@1795000000123.")
    assert fingerprint_of(first.node_id) == fingerprint(first.identity.public_key)
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
            cache.put(f"c/http://w{i}", round_.to_bytes(8, "big"))
    before = cache.stats()
    assert before["tombstone_bytes"] > 64 * 1024
    assert mesh.upkeep.compact_if_needed() == ["cache"]
    after = cache.stats()
    assert after["generation"] == 1 and after["tombstone_bytes"] < 1024
    assert cache.get(f"{mesh.node_id}/c/http://w7") == (39).to_bytes(8, "big")
    assert mesh.upkeep.compact_if_needed() == []  # nothing left to gain


def test_compaction_keeps_a_dead_nodes_workers_served() -> None:
    mesh = mesh_at(1_795_000_000.0)
    mesh.upkeep.compact_min_tombstone_bytes = 0
    dead = Replica("workers", NodeIdentity.generate("dead@1", random.Random(5)))
    WorkerDirectory(dead, dead.owner).publish_add(
        "http://gone-node-worker:8000", {"url": "http://gone-node-worker:8000"}, (1, 0, dead.owner)
    )
    workers = mesh.replicas["workers"]
    workers.apply(dead.diff(workers.state_vector()))
    for i in range(3000):  # churn of our own records
        mesh.directory.publish_add(
            f"http://w{i % 30}", {"url": f"http://w{i % 30}"}, (2 + i, 0, mesh.node_id)
        )
    assert "http://gone-node-worker:8000" in mesh.directory.effective()
    assert mesh.upkeep.compact_if_needed() == ["workers"]  # the dead node is not a live member
    mesh.upkeep.compact_if_needed()  # releases the previous generation (its owner is not live)
    assert workers.previous_owners() == set()
    assert "http://gone-node-worker:8000" in mesh.directory.effective()


# --- secure by default: the keyring gate ---------------------------------------------------------
KEY = "a-cluster-key-of-24-chars"


def mesh_cfg(**changes: object) -> MeshNodeConfig:
    return replace_path(GatewayConfig(), "mesh", enable_mesh=True, **changes).mesh


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gw.internal"])
def test_a_mesh_beyond_loopback_needs_a_key(host: str) -> None:
    with pytest.raises(ConfigError, match="--cluster-key") as err:
        mesh_keyring(mesh_cfg(mesh_host=host))
    assert "\n" not in str(err.value)  # one clear line
    assert mesh_keyring(mesh_cfg(mesh_host=host, mesh_insecure=True)) is None
    assert isinstance(mesh_keyring(mesh_cfg(mesh_host=host, cluster_key=KEY)), Keyring)


def test_a_loopback_mesh_may_run_keyless() -> None:
    assert mesh_keyring(mesh_cfg(mesh_host="127.0.0.9")) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"cluster_key": "short-key"},
        {"cluster_key": "a key with blanks 0123"},
        {"cluster_key": KEY, "cluster_key_secondary": ("short",)},
        {"cluster_key_secondary": (KEY,)},
        {"cluster_key": KEY, "cluster_key_secondary": tuple(f"{KEY}-{i}" for i in range(9))},
    ],
)
def test_bad_keys_are_refused_without_echoing_them(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as err:
        mesh_keyring(mesh_cfg(mesh_host="10.0.0.5", **changes))
    for value in [changes.get("cluster_key"), *changes.get("cluster_key_secondary", ())]:  # type: ignore[misc]
        assert not value or str(value) not in str(err.value)


def test_secondary_keys_split_on_commas_and_repeats() -> None:
    ring = mesh_keyring(
        mesh_cfg(cluster_key=KEY, cluster_key_secondary=(f"{KEY}-b,{KEY}-c", f"{KEY}-d"))
    )
    assert ring is not None and len(ring) == 4
    sealed = Keyring(f"{KEY}-c").seal(b"p", b"x")
    assert ring.open(b"p", sealed) == b"x"


@pytest.mark.parametrize("name", ["a/b", "has space", "", "x" * 201])
def test_server_names_that_cannot_be_owner_prefixes_are_refused(name: str) -> None:
    cfg = replace_path(
        GatewayConfig(), "mesh", enable_mesh=True, mesh_host="127.0.0.7", mesh_server_name=name
    )
    with pytest.raises(ConfigError, match="--mesh-server-name"):
        GatewayMesh(cfg, FakeClock(), random.Random(0))


def test_an_insecure_mesh_warns_every_minute_while_it_runs() -> None:
    from structlog.testing import capture_logs

    cfg = replace_path(
        GatewayConfig(), "mesh", enable_mesh=True, mesh_host="0.0.0.0", mesh_insecure=True
    )
    mesh = GatewayMesh(cfg, FakeClock(), random.Random(0), wall=lambda: 1_795_000_000.0)
    assert mesh.insecure and mesh.keyring is None
    with capture_logs() as logs:
        for now in (0.0, 1.0, 30.0, 59.9, 60.0, 61.0, 120.5):
            mesh.upkeep.tick(now)
    assert [e["event"] for e in logs].count("mesh_insecure") == 3  # at 0, 60 and 120.5 s
    keyed = replace_path(cfg, "mesh", cluster_key=KEY)
    assert not GatewayMesh(keyed, FakeClock(), random.Random(0)).insecure


def test_secondary_keys_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from smg.cli import gateway_config_from, parse

    argv = [
        "node",
        "--cluster-key",
        KEY,
        "--cluster-key-secondary",
        "k-b",
        "--cluster-key-secondary",
        "k-c,k-d",
    ]
    _, ns = parse(argv)
    assert gateway_config_from(ns).mesh.cluster_key_secondary == ("k-b", "k-c,k-d")
    monkeypatch.setenv("SMG_CLUSTER_KEY_SECONDARY", "k-e,k-f")
    _, ns = parse(["node"])
    assert gateway_config_from(ns).mesh.cluster_key_secondary == ("k-e", "k-f")


async def test_seed_names_resolve_to_addresses_and_unknown_ones_are_skipped() -> None:
    seeds = ["10.0.0.1:4000", "localhost:5", "no-such-host.invalid:6", "[::1]:7"]
    assert await resolve_seeds(seeds, timeout_s=2.0) == ["10.0.0.1:4000", "127.0.0.1:5", "[::1]:7"]
