"""A real 3-node mesh across network namespaces, partitioned by the kernel (nftables), not by
the in-process fault injector.

Each node runs in its own namespace (`ip netns exec NS python -m smg node ...`) with a veth into
a bridge in the root namespace; the root namespace holds an address on the bridge, so the test
reaches every node's HTTP port directly, and the simulated worker listens there too. The
partition is a pair of nft drop rules inside one node's namespace (input from and output to the
other nodes); the heal deletes the table. The assertions mirror the loopback partition test:
the cut hides a registration, and after the heal every view is all-alive and the worker
directories converge.

Needs root, iproute2 and nft; probes by creating (and deleting) a namespace and listing its
ruleset, and skips with the reason otherwise. Namespaces, links and processes are always removed.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, http, wait_until

# kernel partitions between network namespaces; suspicion and gossip timers must not share the CPU
pytestmark = [pytest.mark.chaos, pytest.mark.serial]

KEY = "netns-cluster-key"
# The nodes serve HTTP beyond loopback (10.x addresses): the admin plane needs a control-plane key.
ADMIN_KEY = "netns-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
HTTP_PORT, MESH_PORT, SIM_PORT = 8000, 7946, 9000
STOP_DEADLINE_S = 5.0


def _run(*argv: str, check: bool = True, input_text: str | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, input=input_text, timeout=10)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def _unavailable() -> str | None:
    """Why namespaces + nft cannot be used here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool!r} is not installed"
    probe = f"smgprobe{os.getpid()}{random.randrange(10**6)}"
    try:
        _run("ip", "netns", "add", probe)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns add is not permitted: {exc}"
    try:
        _run("ip", "netns", "exec", probe, "nft", "list", "ruleset")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"nft does not work inside a namespace: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


@dataclass
class NsNode:
    ns: str
    ip: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{HTTP_PORT}"

    @property
    def addr(self) -> str:
        return f"{self.ip}:{MESH_PORT}"

    def get(self, path: str) -> Any:
        r = http("GET", self.url + path, headers=ADMIN, timeout_s=2.0)
        assert r.status == 200, r
        return r.json()

    def states(self) -> dict[str, str]:
        return {m["addr"]: m["state"] for m in self.get("/mesh/status")["members"]}

    def digest(self) -> str:
        return self.get("/mesh/status")["namespaces"]["workers"]["digest"]

    def has_worker(self, url: str) -> bool:
        return any(w["url"] == url for w in self.get("/workers")["workers"])


class Net:
    """A bridge in the root namespace and one namespace per node, veth'd into it."""

    def __init__(self, tmp: Path, n: int) -> None:
        self.tmp = tmp
        self.tag = f"{os.getpid() % 1000:03d}{random.randrange(100):02d}"
        used = _run("ip", "-4", "route", "show")
        third = next(
            t for t in random.sample(range(1, 255), 254) if f"10.231.{t}." not in used
        )  # a /24 nobody routes yet
        self.prefix = f"10.231.{third}"
        self.bridge = f"smgbr{self.tag}"
        self.host_ip = f"{self.prefix}.254"
        self.namespaces = [f"smgns{self.tag}-{i}" for i in range(n)]
        self.links = [f"smgv{self.tag}{i}" for i in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.nodes: list[NsNode] = []

    def up(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, (ns, host_end) in enumerate(zip(self.namespaces, self.links, strict=True)):
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", host_end, "master", self.bridge)
            _run("ip", "link", "set", host_end, "up")
            inside = ("ip", "netns", "exec", ns, "ip")
            _run(*inside, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            _run(*inside, "link", "set", "eth0", "up")
            _run(*inside, "link", "set", "lo", "up")

    def ip(self, i: int) -> str:
        return f"{self.prefix}.{i + 1}"

    def spawn(self, ns: str | None, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SMG_")}
        env["PYTHONUNBUFFERED"] = "1"
        prefix = ["ip", "netns", "exec", ns] if ns else []
        log_path = self.tmp / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                [*prefix, sys.executable, "-m", "smg", *argv],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(popen)
        return popen, log_path

    def start_node(self, i: int, join: list[int]) -> NsNode:
        ip = self.ip(i)
        argv = [
            "node", "--host", ip, "--port", str(HTTP_PORT), "--prometheus-port", "0",
            "--mesh-host", ip, "--mesh-port", str(MESH_PORT), "--mesh-profile", "test",
            "--cluster-key", KEY, "--log-level", "info",
            "--control-plane-api-keys", f"netns:netns:admin:{ADMIN_KEY}",
        ]  # fmt: skip
        if join:
            argv += ["--join", ",".join(f"{self.ip(j)}:{MESH_PORT}" for j in join)]
        popen, log = self.spawn(self.namespaces[i], f"node{i}", argv)
        node = NsNode(self.namespaces[i], ip, popen, log)
        self.nodes.append(node)
        return node

    def partition(self, i: int) -> None:
        """Drop everything between node i and the other nodes, inside node i's namespace (the
        root namespace, where the test and the worker live, stays reachable)."""
        others = ", ".join(self.ip(j) for j in range(len(self.namespaces)) if j != i)
        rules = f"""
        table inet smgcut {{
          chain input {{ type filter hook input priority 0; policy accept;
            ip saddr {{ {others} }} drop; }}
          chain output {{ type filter hook output priority 0; policy accept;
            ip daddr {{ {others} }} drop; }}
        }}
        """
        _run("ip", "netns", "exec", self.namespaces[i], "nft", "-f", "-", input_text=rules)

    def heal(self, i: int) -> None:
        _run("ip", "netns", "exec", self.namespaces[i], "nft", "delete", "table", "inet", "smgcut")

    def logs(self) -> str:
        out = []
        for node in self.nodes:
            with contextlib.suppress(OSError):
                tail = node.log.read_text(errors="replace").splitlines()[-40:]
                out.append(f"--- {node.ns} ({node.ip}) ---\n" + "\n".join(tail))
        return "\n".join(out)

    def down(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
            if p.poll() is None:
                p.kill()
                p.wait(STOP_DEADLINE_S)
        for ns in self.namespaces:  # deleting a namespace deletes its veth end, and so the pair
            _run("ip", "netns", "del", ns, check=False)
        for link in (*self.links, self.bridge):
            _run("ip", "link", "del", link, check=False)


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Net]:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    net = Net(tmp_path, 3)
    try:
        net.up()
        yield net
    finally:
        net.down()


def all_alive(nodes: list[NsNode]) -> bool:
    return all(sum(s == "alive" for s in n.states().values()) == len(nodes) for n in nodes)


def test_a_kernel_partition_hides_a_registration_until_it_heals(net: Net) -> None:
    a = net.start_node(0, [])
    b = net.start_node(1, [0])
    c = net.start_node(2, [0, 1])  # all three start at once: joins are retried until answered
    net.spawn(
        None,
        "sim",
        ["sim", "--host", net.host_ip, "--port", str(SIM_PORT), "--model", "m"],
    )
    sim_url = f"http://{net.host_ip}:{SIM_PORT}"
    nodes = [a, b, c]
    try:
        wait_until(lambda: all_alive(nodes), 30.0, "three nodes alive in every view")
        wait_until(lambda: http("GET", sim_url + "/health").status == 200, 10.0, "the sim")

        net.partition(2)
        t0 = time.monotonic()
        wait_until(
            lambda: a.states().get(c.addr) == "dead" and b.states().get(c.addr) == "dead",
            15.0,
            "A and B declare C dead",
        )
        wait_until(
            lambda: c.states().get(a.addr) == "dead" and c.states().get(b.addr) == "dead",
            15.0,
            "C declares A and B dead",
        )
        print(f"nft cut -> both sides see the other dead after {time.monotonic() - t0:.2f} s")
        r = http("POST", a.url + "/workers", {"url": sim_url}, headers=ADMIN)
        assert r.status == 202, r
        wait_until(lambda: b.has_worker(sim_url), 5.0, "B imports the worker")
        time.sleep(1.0)
        assert not c.has_worker(sim_url)  # the partition holds

        net.heal(2)
        t1 = time.monotonic()
        wait_until(lambda: all_alive(nodes), 20.0, "all alive again after the heal")
        wait_until(lambda: c.has_worker(sim_url), 20.0, "C imports after the heal")
        print(f"heal -> all alive and C has the worker after {time.monotonic() - t1:.2f} s")
        wait_until(
            lambda: len({n.digest() for n in nodes}) == 1, 10.0, "identical worker directories"
        )
    except BaseException:
        print(net.logs())
        raise
