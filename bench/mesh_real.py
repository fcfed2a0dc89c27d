"""Failure detection and partition healing of a real mesh: N `smg node` processes on loopback.

With the LAN profile (production defaults) unless --profile, for each N in --nodes:

1. kill -9: SIGKILL one node (not the seed), time until it is DEAD in every survivor's
   /mesh/status; restart it on a fresh mesh port, wait until all N are alive again; --reps times.
   Reports p50 / p99 (nearest rank) / max against the issue's targets (p99 <= 9 s at N=3,
   <= 12 s at N=5).
2. partition: cut the nodes into two halves with /mesh/faults (each side blocks the other),
   register one worker on each side, hold --partition-s, heal, and time until every view is
   all-alive and until the "workers" digests are identical on every node.

Prints a markdown table. Logs go to --logs.

    python bench/mesh_real.py --nodes 3 5 --reps 5 --partition-s 60
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procs import REPO, free_port, stop_all

TARGET_P99_S = {3: 9.0, 5: 12.0}
KEY = "bench-mesh-real-cluster-key"


def call(url: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> float:
    """Seconds until `pred()` holds (errors count as "not yet"); SystemExit at the deadline."""
    t0 = time.monotonic()
    while True:
        try:
            if pred():
                return time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() - t0 > timeout_s:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class Node:
    def __init__(self, i: int, host: str, http_port: int, mesh_port: int) -> None:
        self.i, self.host, self.http_port, self.mesh_port = i, host, http_port, mesh_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.node_id = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.mesh_port}"

    def status(self) -> dict[str, Any]:
        return call(self.url + "/mesh/status")

    def states(self) -> dict[str, str]:
        return {m["node_id"]: m["state"] for m in self.status()["members"]}


class Cluster:
    def __init__(self, n: int, profile: str, logs: Path) -> None:
        self.n, self.profile, self.logs = n, profile, logs
        self.nodes: list[Node] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.boots = 0

    def start(self, node: Node, join: list[Node]) -> None:
        argv = [
            sys.executable, "-m", "smg", "node",
            "--host", "127.0.0.1", "--port", str(node.http_port), "--prometheus-port", "0",
            "--mesh-host", node.host, "--mesh-port", str(node.mesh_port),
            "--mesh-profile", self.profile, "--cluster-key", KEY, "--mesh-fault-injection",
            "--log-level", "warn",
        ]  # fmt: skip
        if join:
            argv += ["--join", ",".join(j.addr for j in join)]
        self.boots += 1
        with open(self.logs / f"n{self.n}-node{node.i}-boot{self.boots}.log", "wb") as log:
            node.proc = subprocess.Popen(
                argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(node.proc)
        wait_for(lambda: bool(node.status()), 60, f"node{node.i} to serve /mesh/status", 0.1)
        node.node_id = node.status()["node_id"]

    def up(self) -> None:
        for i in range(self.n):
            node = Node(i, f"127.0.0.{60 + i}", free_port(), free_port())
            self.start(node, self.nodes[:1])
            self.nodes.append(node)
        self.wait_all_alive(60)

    def all_alive(self) -> bool:
        ids = {n.node_id for n in self.nodes}
        for node in self.nodes:
            states = node.states()
            if any(states.get(i) != "alive" for i in ids):
                return False
        return True

    def wait_all_alive(self, timeout_s: float) -> float:
        return wait_for(self.all_alive, timeout_s, f"all {self.n} alive in every view", 0.1)

    def digests(self) -> set[str]:
        return {n.status()["namespaces"]["workers"]["digest"] for n in self.nodes}

    def down(self) -> None:
        stop_all(self.procs)


def bench_kill(cluster: Cluster, reps: int) -> list[float]:
    times: list[float] = []
    for rep in range(reps):
        victim = cluster.nodes[1 + rep % (cluster.n - 1)]  # never the seed
        survivors = [n for n in cluster.nodes if n is not victim]
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(5)
        dead_id = victim.node_id
        elapsed = wait_for(
            lambda d=dead_id, ss=survivors: all(s.states().get(d) == "dead" for s in ss),
            60,
            f"node{victim.i} dead in every survivor",
        )
        times.append(elapsed)
        print(f"  N={cluster.n} rep {rep + 1}: kill -9 -> dead everywhere in {elapsed:.2f} s")
        # Restart on a fresh mesh port: a same-address restart can hit the epoch-order bug
        # (see the report), which is not what this bench measures.
        victim.mesh_port = free_port()
        victim.http_port = free_port()
        cluster.start(victim, survivors)
        cluster.wait_all_alive(60)
        time.sleep(1.0)
    return times


def bench_partition(cluster: Cluster, hold_s: float) -> tuple[float, float, float]:
    """(seconds until each side saw the other dead, heal -> all alive, heal -> same digests)."""
    half = (cluster.n + 1) // 2
    left, right = cluster.nodes[:half], cluster.nodes[half:]
    sims: list[subprocess.Popen[bytes]] = []
    sim_urls = []
    for _ in range(2):
        port = free_port()
        argv = [sys.executable, "-m", "smg", "sim", "--host", "127.0.0.1", "--port", str(port)]
        with open(cluster.logs / f"n{cluster.n}-sim{port}.log", "wb") as log:
            sims.append(subprocess.Popen([*argv, "--model", "m"], cwd=REPO, stdout=log, stderr=log))
        sim_urls.append(f"http://127.0.0.1:{port}")
    cluster.procs.extend(sims)
    t_cut = time.monotonic()
    for side, other in ((left, right), (right, left)):
        for node in side:
            call(node.url + "/mesh/faults", {"blocked": [o.addr for o in other]})

    def split() -> bool:
        for side, other in ((left, right), (right, left)):
            for node in side:
                states = node.states()
                if any(states.get(o.node_id) != "dead" for o in other):
                    return False
        return True

    t_split = wait_for(split, hold_s + 60, "both sides to see the other dead", 0.2)
    for side, url in zip((left, right), sim_urls, strict=True):
        call(side[0].url + "/workers", {"url": url})
    time.sleep(max(0.0, hold_s - (time.monotonic() - t_cut)))
    assert len(cluster.digests()) > 1, "the partition did not hold"
    for node in cluster.nodes:
        call(node.url + "/mesh/faults", {})
    t_heal = time.monotonic()
    t_alive = cluster.wait_all_alive(180)
    wait_for(lambda: len(cluster.digests()) == 1, 180, "identical worker digests", 0.1)
    return t_split, t_alive, time.monotonic() - t_heal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--partition-s", type=float, default=60.0)
    ap.add_argument("--skip-partition", action="store_true")
    ap.add_argument("--profile", default="lan", choices=("lan", "local", "test"))
    ap.add_argument("--logs", default="/tmp/smg-mesh-real")
    args = ap.parse_args()
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    rows_kill, rows_part = [], []
    for n in args.nodes:
        cluster = Cluster(n, args.profile, logs)
        try:
            cluster.up()
            times = bench_kill(cluster, args.reps)
            rows_kill.append((n, times))
            if not args.skip_partition:
                rows_part.append((n, *bench_partition(cluster, args.partition_s)))
        finally:
            cluster.down()

    print(f"\nprofile {args.profile}\n")
    print("| N | kill -9 -> DEAD in all survivors: p50 | p99 | max | reps | target p99 |")
    print("|---|---|---|---|---|---|")
    for n, times in rows_kill:
        target = TARGET_P99_S.get(n)
        p99 = nearest_rank(times, 0.99)
        verdict = f"{target:g} s ({'met' if p99 <= target else 'MISSED'})" if target else "-"
        print(
            f"| {n} | {statistics.median(times):.2f} s | {p99:.2f} s | {max(times):.2f} s"
            f" | {len(times)} | {verdict} |"
        )
    if rows_part:
        print(
            f"\n| N | partition {args.partition_s:g} s: sides see each other DEAD after"
            " | heal -> all alive | heal -> identical worker digests |"
        )
        print("|---|---|---|---|")
        for n, t_split, t_alive, t_digest in rows_part:
            print(f"| {n} | {t_split:.2f} s | {t_alive:.2f} s | {t_digest:.2f} s |")


if __name__ == "__main__":
    main()
