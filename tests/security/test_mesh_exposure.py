"""Finding 1 of issue 10: the mesh was open by default (no --cluster-key needed, bound to 0.0.0.0),
an unsigned Join got the full replicated state back, and that state held the workers' api_keys
(worker records) and users' prompt text (cache-aware summaries).

Real `smg node` processes on 127.0.0.x; the attacker is a socket in the test process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from integration.conftest import REPO, Launcher, free_port, wait_until
from integration.test_mesh import KEY, Node, start_node

from smg.mesh.keyring import Keyring
from smg.mesh.messages import Join, PushPull

from .mesh_peer import MeshPeer

SECRET = "sk-worker-SECRET-7f3a9c"
PROMPT = "Confidential: the launch code is PINEAPPLE-7734 and the vault opens at dawn. "


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SMG_")}


@pytest.mark.integration  # starts `smg node`
def test_a_mesh_beyond_loopback_without_a_key_refuses_to_start() -> None:
    argv = [sys.executable, "-m", "smg", "node", "--mesh-host", "0.0.0.0"]
    argv += ["--mesh-port", str(free_port()), "--port", str(free_port())]
    argv += ["--host", "127.0.0.1", "--prometheus-port", "0"]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("a keyless mesh on 0.0.0.0 started (and kept running)")
    assert proc.returncode != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err  # one clear line...
    assert "--cluster-key" in lines[0] and "--mesh-insecure" in lines[0]  # ...saying what to set


def test_mesh_insecure_is_the_only_way_around_and_it_warns(launch: Launcher) -> None:
    node = start_node(
        launch, "0.0.0.0", [], cluster_key=None, mesh_insecure=True, mesh_advertise_host="127.0.0.1"
    )
    assert node.status()["members"]
    wait_until(lambda: "mesh_insecure" in node.gw.proc.log_tail(400), 10.0, "the warning")


@pytest.fixture
def keyed(launch: Launcher) -> Iterator[Node]:
    yield start_node(launch, "127.0.0.81", [], policy="cache_aware")


def test_an_unkeyed_or_wrongly_keyed_join_gets_nothing_back(keyed: Node) -> None:
    outsiders = [
        MeshPeer("127.0.0.82", None),
        MeshPeer("127.0.0.83", Keyring("not-the-cluster-key")),
    ]
    insider = MeshPeer("127.0.0.84", Keyring(KEY))
    try:
        for peer in outsiders:
            for _ in range(3):
                peer.send(keyed.addr, Join(peer.node_id, peer.addr, 0))
        insider.send(keyed.addr, Join(insider.node_id, insider.addr, 0))
        # the right key is answered at once (its table over TCP): the probe does work
        wait_until(lambda: insider.connections > 0, 10.0, "the keyed join's answer")
        _, answer = insider.inbox.get(timeout=5)
        assert isinstance(answer, PushPull)
        time.sleep(2.0)  # ample time for an answer to the others
        for peer in outsiders:
            assert peer.connections == 0 and peer.inbox.empty() and peer.datagrams.empty()
        dropped = keyed.status()["dropped"]
        assert dropped.get("bad_mac", 0) >= 6, dropped
        assert not any(
            m["node_id"] in {p.node_id for p in outsiders} for m in keyed.status()["members"]
        )
    finally:
        for peer in (*outsiders, insider):
            peer.close()


def test_the_replicated_state_holds_no_worker_key_and_no_prompt_text(
    launch: Launcher, keyed: Node
) -> None:
    sim = launch.sim("m")
    r = keyed.gw.request("POST", "/workers", {"url": sim.url, "api_key": SECRET})
    assert r.status == 202, r
    wait_until(lambda: keyed.chat_ok(), 10.0, "the worker serves")
    for i in range(6):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": f"{i} {PROMPT * 4}"}],
            "max_tokens": 1,
        }
        assert keyed.gw.request("POST", "/v1/chat/completions", body).status == 200
    insider = MeshPeer("127.0.0.85", Keyring(KEY))  # reads what any member of the mesh reads
    try:

        def summaries_published() -> dict[str, dict[str, bytes]] | None:
            docs = insider.documents(keyed.addr)
            return docs if any("/c/" in k for k in docs["cache"]) else None

        docs = wait_until(summaries_published, 15.0, "cache summaries in the replicated state")
        raw = b"".join(k.encode() + v for ns in docs.values() for k, v in ns.items()) + b"".join(
            insider.updates(keyed.addr).values()
        )
        assert sim.url.encode() in raw  # the worker record is there...
        assert SECRET.encode() not in raw  # ...without its key
        assert b"api_key" not in raw
        for fragment in ("PINEAPPLE", "launch code", "vault opens"):
            assert fragment.encode() not in raw, fragment
    finally:
        insider.close()
