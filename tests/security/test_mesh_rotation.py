"""Key rotation without a split (the success path of the mesh's keyring), and a wrong key that
never gets in.

A real 3-node cluster rotates from K1 to K2 the way keyring.py documents, one rolling restart
per step: add K2 as a secondary everywhere, make it the primary everywhere, drop K1. After every
single restart all three nodes see each other alive and hold identical replicated state, and a
worker registered before the rotation is served by every node. (The shorter sequence "restart
each with K2 primary and K1 secondary, then drop K1" splits the cluster while it runs: a node
that only knows K1 cannot read what a node with primary K2 sends.)"""

from __future__ import annotations

import signal
import time
from typing import Any

from integration.conftest import Launcher, wait_until
from integration.test_mesh import Node, all_alive, start_node

K1, K2 = "rotation-key-one-0001-aaaa", "rotation-key-two-0002-bbbb"
WRONG = "a-wrong-cluster-key-0003-cc"
HOSTS = ("127.0.0.121", "127.0.0.122", "127.0.0.123")


def restart(launch: Launcher, node: Node, peers: list[Node], keys: dict[str, Any]) -> Node:
    node.gw.proc.signal(signal.SIGTERM)
    node.gw.proc.popen.wait(15)
    host, port = node.addr.rsplit(":", 1)
    return start_node(launch, host, peers, int(port), **keys)


def one_cluster(nodes: list[Node], url: str) -> bool:
    if not all_alive(nodes, len(nodes)):
        return False
    digests = {n.status()["namespaces"]["workers"]["digest"] for n in nodes}
    return len(digests) == 1 and all(n.gw.worker_by_url(url) for n in nodes)


def test_a_rolling_key_rotation_keeps_one_cluster(launch: Launcher) -> None:
    a = start_node(launch, HOSTS[0], [], cluster_key=K1)
    b = start_node(launch, HOSTS[1], [a], cluster_key=K1)
    c = start_node(launch, HOSTS[2], [a, b], cluster_key=K1)
    nodes = [a, b, c]
    sim = launch.sim("m")
    assert a.gw.request("POST", "/workers", {"url": sim.url}).status == 202
    wait_until(lambda: one_cluster(nodes, sim.url), 20.0, "one cluster on K1")
    steps = [
        {"cluster_key": K1, "cluster_key_secondary": K2},
        {"cluster_key": K2, "cluster_key_secondary": K1},
        {"cluster_key": K2},
    ]
    for keys in steps:
        for i in range(len(nodes)):
            others = nodes[:i] + nodes[i + 1 :]
            nodes[i] = restart(launch, nodes[i], others, keys)
            assert all_alive(others, 2)  # the two that stayed up never lost each other
            wait_until(lambda: one_cluster(nodes, sim.url), 20.0, f"one cluster after {keys}")
    for n in nodes:
        assert n.chat_ok()

    # K1 is gone from the cluster: neither a node with only K1 nor one with a wrong key gets in
    outsiders = [
        start_node(launch, "127.0.0.124", nodes, cluster_key=K1),
        start_node(launch, "127.0.0.125", nodes, cluster_key=WRONG),
    ]
    time.sleep(4.0)  # many gossip, probe and push-pull rounds on the test profile
    members = {m["addr"] for n in nodes for m in n.status()["members"]}
    assert not members & {o.addr for o in outsiders}
    for o in outsiders:
        assert [m["addr"] for m in o.status()["members"]] == [o.addr]
        assert o.gw.worker_by_url(sim.url) is None
