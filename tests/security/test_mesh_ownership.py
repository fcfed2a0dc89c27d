"""Finding 2 of issue 10: any peer could write any replicated key. A forged update re-pointed
another node's model routing, and a malformed rate-limit counter turned requests into 500.

The attacker is an insider: a socket in the test process that holds the cluster key (so the
encryption lets it in) and has a signing key of its own, but not the victim's."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator

import msgpack
import pytest
from integration.conftest import Launcher, wait_until
from integration.test_mesh import KEY, Node, all_alive, start_node
from pycrdt import Doc, Map

from smg.mesh.doc_wire import decode_update, encode_update
from smg.mesh.keyring import Keyring
from smg.mesh.messages import DocUpdate

from .mesh_peer import MeshPeer


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def rejected(node: Node, namespace: str) -> dict[str, int]:
    return node.status().get("rejected_writes", {}).get(namespace, {})


def forge(
    insider: MeshPeer, node: Node, namespace: str, edit: object, own_id: bool = False
) -> None:
    """Take `node`'s document as it is, change it with `edit(map, client_id)` as any pycrdt
    client could (as the insider's own Yjs client when `own_id`), and send `node` the update."""
    generation, payload = decode_update(insider.updates(node.addr, [namespace])[namespace])
    client = random.randrange(1, 2**53)
    if own_id:
        client = insider.identity.client_id(namespace, generation)
    doc = Doc(client_id=client)
    doc.apply_update(payload)
    updates: list[bytes] = []
    doc.observe(lambda e: updates.append(bytes(e.update)))
    edit(doc.get("m", type=Map), client)  # type: ignore[operator]
    insider.stream(node.addr, DocUpdate(namespace, encode_update(generation, updates[-1])))


@pytest.fixture
def insider() -> Iterator[MeshPeer]:
    peer = MeshPeer("127.0.0.93", Keyring(KEY), name="mallory@1")
    yield peer
    peer.close()


def test_a_forged_write_to_another_nodes_worker_record_is_refused_and_counted(
    launch: Launcher, insider: MeshPeer
) -> None:
    a = start_node(launch, "127.0.0.91", [])
    b = start_node(launch, "127.0.0.92", [a])
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive")
    sim = launch.sim("m")
    assert b.gw.request("POST", "/workers", {"url": sim.url}).status == 202
    wait_until(lambda: a.chat_ok(), 10.0, "A serves B's worker")
    key = f"{b.status()['node_id']}/w/{sim.url}"
    remove = pack(["remove", None, [2**50, 0, "mallory"]])  # what the finding's attacker wrote

    def overwrite(m: Map, _client: int) -> None:
        m[key] = remove

    def signed_by_me(m: Map, client: int) -> None:
        m[key] = insider.identity.seal_value("workers", 0, client, 0, key, remove)

    def delete(m: Map, _client: int) -> None:
        del m[key]

    forge(insider, a, "workers", overwrite)
    forge(insider, a, "workers", signed_by_me, own_id=True)
    forge(insider, a, "workers", delete)
    wait_until(lambda: sum(rejected(a, "workers").values()) >= 3, 10.0, "three refusals")
    reasons = rejected(a, "workers")
    assert set(reasons) == {"unsigned", "not_owner", "forbidden_delete"}, reasons
    assert a.gw.metric("smg_mesh_rejected_writes_total", namespace="workers") is not None
    time.sleep(1.0)
    assert a.gw.worker_by_url(sim.url) is not None  # the routing B set up is intact
    for _ in range(5):
        assert a.chat_ok() and b.chat_ok()
    digests = {n.status()["namespaces"]["workers"]["digest"] for n in (a, b)}
    assert len(digests) == 1  # and A did not diverge from B


def test_a_malformed_rate_limit_counter_never_turns_requests_into_500(
    launch: Launcher, insider: MeshPeer
) -> None:
    # 20 requests per 10 s window over two live nodes: past its fair share of 10, a node weighs
    # the other nodes' counters (borrowing), which is where a malformed one used to raise
    limits = {"rate_limit_tokens_per_second": 2, "rate_limit_window_secs": 10}
    a = start_node(launch, "127.0.0.94", [], **limits)
    b = start_node(launch, "127.0.0.95", [a], **limits)
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive")
    sim = launch.sim("m")
    assert a.gw.request("POST", "/workers", {"url": sim.url}).status == 202
    wait_until(lambda: a.chat_ok(), 10.0, "the worker serves")
    # the next window, not this one: the probes above must not count against the 20
    served_in = math.floor(time.time() / 10)
    wait_until(
        lambda: math.floor(time.time() / 10) > served_in and time.time() % 10 < 1.0,
        12.0,
        "a fresh window",
        interval_s=0.01,
    )
    window = math.floor(time.time() / 10)
    bad = [window, {"anonymous": "x", "t:tenant": [1]}, {"anonymous": None}]
    mine = f"{insider.node_id}/rl"  # the insider's own key: ownership lets it write there

    def unsigned(m: Map, _client: int) -> None:
        m[mine] = pack(bad)

    def signed(m: Map, client: int) -> None:
        m[mine] = insider.identity.seal_value("rate_limits", 0, client, 0, mine, pack(bad))

    forge(insider, a, "rate_limits", unsigned)
    forge(insider, a, "rate_limits", signed, own_id=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    statuses = []
    while time.time() % 10 < 8.5 and math.floor(time.time() / 10) == window:
        statuses.append(a.gw.request("POST", "/v1/chat/completions", body).status)
        time.sleep(0.05)
    assert 500 not in statuses and statuses.count(200) >= 10 and 429 in statuses, statuses
    assert set(rejected(a, "rate_limits")) == {"unsigned", "invalid_value"}
