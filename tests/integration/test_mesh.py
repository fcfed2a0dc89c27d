"""A real 3-node mesh on loopback: `smg node --join`, one address per node (127.0.0.x).

A worker registered on node A serves through B and C; A is killed with SIGKILL and B and C keep
serving it; a change (PATCH) and a removal on B reach C; a partition (the in-process
fault-injecting transport) hides a registration until it heals; garbage on the mesh port is
counted and dropped.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .conftest import Gateway, Launcher, Sim, free_port, wait_until

KEY = "integration-cluster-key"
BODY = {"model": "m", "messages": [{"role": "user", "content": "mesh"}], "max_tokens": 2}


@dataclass
class Node:
    gw: Gateway
    addr: str  # mesh host:port

    def status(self) -> dict[str, Any]:
        r = self.gw.request("GET", "/mesh/status")
        assert r.status == 200, r
        return r.json()

    def states(self) -> dict[str, str]:
        return {m["addr"]: m["state"] for m in self.status()["members"]}

    def chat_ok(self) -> bool:
        return self.gw.request("POST", "/v1/chat/completions", BODY).status == 200

    def faults(self, **plan: Any) -> None:
        r = self.gw.request("POST", "/mesh/faults", plan)
        assert r.status == 200, r


def start_node(
    launch: Launcher, host: str, join: list[Node], port: int | None = None, **options: Any
) -> Node:
    """`smg node` on `host`, on `port` if given (a restart reuses its predecessor's address)."""
    port = port or free_port()
    flags: dict[str, Any] = {
        "mesh_host": host,
        "mesh_port": port,
        "mesh_profile": "test",
        "cluster_key": KEY,
        "mesh_fault_injection": True,
        **options,
    }
    if join:
        flags["join"] = ",".join(n.addr for n in join)
    gw = launch.gateway([], ready=0, command="node", **flags)
    return Node(gw, f"{host}:{port}")


def all_alive(nodes: list[Node], n: int) -> bool:
    for node in nodes:
        states = node.states()
        if sum(1 for s in states.values() if s == "alive") < n:
            return False
    return True


def start_trio(launch: Launcher, subnet: int) -> tuple[Node, Node, Node]:
    """Three nodes on 127.0.0.{subnet+1..3}, B joining A and C joining both."""
    a = start_node(launch, f"127.0.0.{subnet + 1}", [])
    b = start_node(launch, f"127.0.0.{subnet + 2}", [a])
    c = start_node(launch, f"127.0.0.{subnet + 3}", [a, b])
    wait_until(lambda: all_alive([a, b, c], 3), 15.0, "three nodes alive in every view")
    return a, b, c


@pytest.fixture
def trio(launch: Launcher) -> Iterator[tuple[Node, Node, Node]]:
    yield start_trio(launch, 10)


def add_worker(node: Node, sim: Sim) -> None:
    r = node.gw.request("POST", "/workers", {"url": sim.url})
    assert r.status == 202, r


def test_worker_registered_on_a_serves_through_b_and_c_and_survives_a(
    launch: Launcher, trio: tuple[Node, Node, Node]
) -> None:
    a, b, c = trio
    sim = launch.sim("m")
    t0 = time.monotonic()
    add_worker(a, sim)
    wait_until(lambda: b.chat_ok() and c.chat_ok(), 10.0, "B and C serve A's worker", 0.02)
    elapsed = time.monotonic() - t0
    print(f"registered on A -> served through B and C after {elapsed:.2f} s")
    assert elapsed < 5.0  # the issue asks for 1 s on a quiet machine; CI boxes are not quiet
    served_before = sim.stats()["requests"]

    a.gw.proc.signal(signal.SIGKILL)
    for _ in range(5):
        assert b.chat_ok() and c.chat_ok()
    assert sim.stats()["requests"] >= served_before + 10
    wait_until(
        lambda: b.states().get(a.addr) == "dead" and c.states().get(a.addr) == "dead",
        20.0,
        "A declared dead by B and C",
    )
    assert b.chat_ok() and c.chat_ok()  # its worker outlives it

    # A change on B (PATCH) reaches C; the worker's own key stays on B.
    worker = b.gw.worker_by_url(sim.url)
    assert worker is not None
    patch = {"priority": 7, "labels": {"zone": "b"}, "api_key": "sk-b-only"}
    r = b.gw.request("PATCH", f"/workers/{worker['id']}", patch)
    assert r.status == 202, r

    def changed_on_c() -> bool:
        w = c.gw.worker_by_url(sim.url)
        return w is not None and w["priority"] == 7 and w["labels"] == {"zone": "b"}

    wait_until(changed_on_c, 5.0, "C sees B's change of the worker")
    assert c.chat_ok()  # C still calls it (with its own key: none here)

    # A removal on B reaches C.
    r = b.gw.request("DELETE", f"/workers/{worker['id']}")
    assert r.status == 202, r
    wait_until(lambda: c.gw.worker_by_url(sim.url) is None, 5.0, "C forgets the removed worker")


def test_partition_hides_a_registration_until_it_heals(
    launch: Launcher, trio: tuple[Node, Node, Node]
) -> None:
    a, b, c = trio
    c.faults(blocked=[a.addr, b.addr])
    a.faults(blocked=[c.addr])
    b.faults(blocked=[c.addr])
    wait_until(lambda: a.states().get(c.addr) in ("suspect", "dead"), 15.0, "A stops seeing C")
    sim = launch.sim("m")
    add_worker(a, sim)
    wait_until(lambda: b.gw.worker_by_url(sim.url) is not None, 5.0, "B imports the worker")
    time.sleep(1.0)
    assert c.gw.worker_by_url(sim.url) is None  # the partition holds

    for node in (a, b, c):
        node.faults()  # heal
    t0 = time.monotonic()
    wait_until(lambda: all_alive([a, b, c], 3), 20.0, "all alive again after the heal")
    wait_until(lambda: c.gw.worker_by_url(sim.url) is not None, 20.0, "C imports after heal")
    print(f"heal -> C has the worker after {time.monotonic() - t0:.2f} s")
    digests = [n.status()["namespaces"]["workers"]["digest"] for n in (a, b, c)]
    wait_until(
        lambda: len({n.status()["namespaces"]["workers"]["digest"] for n in (a, b, c)}) == 1,
        10.0,
        f"identical worker directories (were {digests})",
    )


def test_nodes_join_and_advertise_by_name(launch: Launcher) -> None:
    """`--join localhost:PORT` and `--mesh-advertise-host localhost` (names, as compose and
    Kubernetes give them) are resolved to addresses: the two nodes form one mesh."""
    a_port, b_port = free_port(), free_port()
    a = start_node(launch, "127.0.0.1", [], a_port, mesh_advertise_host="localhost")
    b = start_node(
        launch,
        "127.0.0.1",
        [Node(a.gw, f"localhost:{a_port}")],
        b_port,
        mesh_advertise_host="localhost",
    )
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes joined by name alive in both views")
    assert set(a.states()) == {f"127.0.0.1:{a_port}", f"127.0.0.1:{b_port}"}


def test_garbage_on_the_mesh_port_is_dropped_and_counted(
    trio: tuple[Node, Node, Node],
) -> None:
    a, _, _ = trio
    host, port = a.addr.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for payload in (b"", b"\x00", b"\x81" + b"x" * 40, b"\x01\x93\x01\x02", b"\xff" * 2000):
            s.sendto(payload, (host, int(port)))
    with socket.create_connection((host, int(port)), timeout=2) as t:
        t.sendall(b"\xff\xff\xff\xff" + b"junk")  # a frame far over the size limit
    wait_until(lambda: sum(a.status()["dropped"].values()) >= 5, 5.0, "drops counted")
    assert a.chat_ok() is False  # no workers: the node still answers (503), it did not crash
    assert all_alive([a], 3)


def test_cluster_rate_limit_across_three_nodes(launch: Launcher) -> None:
    # LAN timing: the request storm saturates this box, and the test profile's 100 ms probe
    # timeout would then see peers die, each side admitting its own limit (as documented)
    opts: dict[str, Any] = {"rate_limit_tokens_per_second": 10, "mesh_profile": "lan"}
    a = start_node(launch, "127.0.0.21", [], **opts)
    b = start_node(launch, "127.0.0.22", [a], **opts)
    c = start_node(launch, "127.0.0.23", [a, b], **opts)
    wait_until(lambda: all_alive([a, b, c], 3), 15.0, "three nodes alive")
    sim = launch.sim("m")
    add_worker(a, sim)
    wait_until(lambda: all(n.chat_ok() for n in (a, b, c)), 10.0, "all serve")
    time.sleep(1.1)  # a fresh window
    t0 = time.monotonic()
    admitted = limited = 0
    per_window: dict[int, int] = {}
    while time.monotonic() - t0 < 3.0:
        for n in (a, b, c):
            r = n.gw.request("POST", "/v1/chat/completions", BODY)
            if r.status == 200:
                admitted += 1
                per_window[int(time.time())] = per_window.get(int(time.time()), 0) + 1
            else:
                assert r.status == 429, r
                assert r.json()["error"]["code"] == "rate_limit_exceeded"
                limited += 1
    windows = time.monotonic() - t0
    print(
        f"cluster rate limit 10/s over {windows:.1f} s: admitted {admitted}, limited {limited},"
        f" per wall-clock second {sorted(per_window.items())}"
    )
    assert limited > 0
    # the limiter's windows are wall-clock seconds, like the buckets above
    assert max(per_window.values()) <= 1.1 * 10, per_window
    assert admitted <= 1.1 * 10 * (windows + 1), admitted


def test_a_node_starts_warm_from_the_others_cache_summaries(launch: Launcher) -> None:
    # cache_aware on both nodes; A routes 12 conversations over two workers and publishes what
    # it routed where; B, which never saw them, sends each conversation where A did. (Mesh nodes
    # also place a new prefix by rendezvous hashing, the same on every node; the summaries are
    # what carries a placement the hash did not make: test_hash_misses.py.)
    a = start_node(launch, "127.0.0.31", [], policy="cache_aware")
    b = start_node(launch, "127.0.0.32", [a], policy="cache_aware")
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive")
    s1, s2 = launch.sims("m", "m")
    add_worker(a, s1)
    add_worker(a, s2)
    for n in (a, b):
        wait_until(lambda n=n: n.gw.request("GET", "/v1/models").json()["data"], 10.0, "models")

    def routed(node: Node, i: int) -> str:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": f"conversation {i}: " + "context " * 40}],
            "max_tokens": 1,
        }
        r = node.gw.request("POST", "/v1/chat/completions", body)
        assert r.status == 200, r
        routed_to = r.header("X-SMG-Routed-Worker-Id")  # the worker's id on this node
        assert routed_to is not None
        return {w["id"]: w["url"] for w in node.gw.workers()}[routed_to]

    on_a = {i: routed(a, i) for i in range(12)}
    assert len(set(on_a.values())) == 2  # A spread them over both workers
    time.sleep(1.5)  # A publishes its summaries every second on the test profile

    def same_cache() -> bool:
        docs = [n.status()["namespaces"]["cache"] for n in (a, b)]
        return docs[1]["live_keys"] >= 2 and docs[0]["digest"] == docs[1]["digest"]

    wait_until(same_cache, 10.0, "A's complete summaries on B")
    time.sleep(0.2)
    on_b = {i: routed(b, i) for i in reversed(range(12))}
    assert on_b == on_a


def test_nodes_run_the_grpc_pipeline_for_an_engine_registered_elsewhere(
    launch: Launcher,
) -> None:
    # Every node is a full gRPC-mode server: B fetches the tokenizer from the engine A
    # registered, applies the chat template, streams detokenized text and counts usage.
    a = start_node(launch, "127.0.0.51", [])
    b = start_node(launch, "127.0.0.52", [a])
    wait_until(lambda: all_alive([a, b], 2), 15.0, "two nodes alive")
    engine = launch.engine("qwen-sim", runtime="sglang")
    r = a.gw.request("POST", "/workers", {"url": engine.url})
    assert r.status == 202, r
    wait_until(
        lambda: b.gw.request("GET", "/v1/models").json()["data"], 30.0, "B serves the engine"
    )
    client = b.gw.client()
    stream = client.chat.completions.create(
        model="qwen-sim",
        messages=[{"role": "user", "content": "Say something"}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    assert text and usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens > 5  # the chat template was applied on B, not by the engine
    assert engine.stats()["requests"] >= 1


def two_free_ports() -> int:
    """A base port whose next port is free too (a `--workers 2` node's children take both)."""
    for _ in range(20):
        base, nxt = free_port(), free_port()
        if nxt == base + 1:
            return base
    raise AssertionError("no two consecutive free ports")


def test_a_node_of_two_processes_is_two_members_of_the_cluster(launch: Launcher) -> None:
    """`smg node --workers 2`: each process joins the user's cluster on its own port (the mesh
    port and the next), so a third node sees three members, and a worker registered on that
    node is served through both processes of the first."""
    a = start_node(launch, "127.0.0.61", [], two_free_ports(), processes=2, history_backend="none")
    b = start_node(launch, "127.0.0.62", [a])
    base = int(a.addr.rsplit(":", 1)[1])
    members = {a.addr, f"127.0.0.61:{base + 1}", b.addr}

    def three_alive_everywhere() -> bool:
        views = [b.states()] + [a.states() for _ in range(6)]  # fresh connections: both
        return all({k for k, s in v.items() if s == "alive"} == members for v in views)

    wait_until(three_alive_everywhere, 20.0, "the two processes and B alive in every view")
    sim = launch.sim("m")
    add_worker(b, sim)
    wait_until(lambda: all(a.chat_ok() for _ in range(6)), 10.0, "A serves B's worker")
    statuses = [a.gw.request("POST", "/v1/chat/completions", BODY).status for _ in range(40)]
    assert statuses == [200] * 40
    served: dict[str, float] = {}
    for name, labels, value in a.gw.metrics():
        if name == "smg_http_requests_total" and labels.get("path") == "/v1/chat/completions":
            served[labels["process"]] = served.get(labels["process"], 0.0) + value
    print(f"smg node --workers 2: chats per process {served}")
    assert set(served) == {"0", "1"} and all(v > 0 for v in served.values())
