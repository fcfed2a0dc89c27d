"""What the mesh costs per node as it grows: 10, 50, 100 gateway nodes in virtual time.

Each node runs the real node's layers (tests/mesh/statenet.py: SwimNode, Replication over the
replicated documents, WorkerDirectory, ClusterRateLimiter) plus the cache-summary document the
cache-aware policy publishes (smg.mesh.cache_summary), on the seeded simulated LAN. Every frame
is really encoded and encrypted and every update really merged, so the bytes are exact and the
process CPU per simulated node-second is a fair proxy for a node's mesh CPU.

The workload is a busy steady state, as a fleet of N gateways in front of the same M engines has
it: every node serves `--rps` requests/s through the cluster rate limiter and routes to each of
the M engines, so every second it publishes each engine's cache summary with `--new-hashes` new
prefix hashes (the summary is bounded at 1024 hashes, 8 KB). The worker records are written
once by one node (an operator's POST /workers); then one more worker is added on node n0 every
`--probe-every` seconds and the time until every node shows it is measured (propagation under
load).

    .venv/bin/python bench/mesh_scale.py                       # n = 10 50 100, defaults
    .venv/bin/python bench/mesh_scale.py --n 10 --engines 8 --window 20
    .venv/bin/python bench/mesh_scale.py --no-cache            # workers + rate limits only
    .venv/bin/python bench/mesh_scale.py --encoding whole delta  # before/after change 2

`--encoding whole` publishes each summary whole (one 8 KB key per engine, as before issue 15's
change 2); `delta` (the node's code) writes only the new hashes into a ring of slot keys.

Reported per n: bytes/s sent per node (UDP gossip, TCP documents; mean and busiest node),
documents' state bytes per node, propagation of a worker add (p50 / max over the probes), and
process CPU per simulated node-second (ms), the hint freshness (how long until every other
node holds a hash n0 just published: p50 / max), with the wall time of the run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mesh import statenet
from mesh.statenet import RateLimitSpec, StateNet

from smg.mesh import cache_summary
from smg.mesh.cache_summary import PREFIX, CacheSummaries
from smg.mesh.replica import Replica
from smg.mesh.swim import SwimNode

CACHE = "cache"
PUBLISH_S = 1.0  # the real node's cache publish interval on the LAN profile
WARMUP_PUBLISHES = 40  # > the summary's lifetime (1024 / 32 new per publish): a steady ring


class WholeSummaries(CacheSummaries):
    """The encoding before change 2: every publish replaces the whole summary (one key)."""

    def publish(self, url: str, hashes: Iterable[bytes]) -> None:
        items = cache_summary.bound(hashes)
        if items:
            self.replica.put(PREFIX + url, b"".join(items))
        else:
            self.replica.delete(PREFIX + url)


def summary_keys(owner: str, url: str, encoding: str) -> list[str]:
    """The document keys `owner`'s summary of `url` lives under."""
    if encoding == "whole":
        return [f"{owner}/{PREFIX}{url}"]
    return [f"{owner}/{cache_summary.slot_key(url, i)}" for i in range(cache_summary.SLOTS)]


class ScaleNet(StateNet):
    """StateNet plus the cache-summary document on every node (as smg/app/mesh.py has it)."""

    def __init__(self, seed: int, with_cache: bool, encoding: str, **kw: object) -> None:
        super().__init__(seed, **kw)  # type: ignore[arg-type]
        self.with_cache = with_cache
        self.encoding = encoding
        self.summaries: dict[str, CacheSummaries] = {}

    def _started(self, addr: str, node: SwimNode) -> None:
        super()._started(addr, node)
        if self.with_cache:
            s = self.state[addr]
            replica = Replica(CACHE, self._identity, cache_summary.valid_value)
            s.replicas[CACHE] = replica  # the Replication holds this same dict
            kind = WholeSummaries if self.encoding == "whole" else CacheSummaries
            self.summaries[addr] = kind(replica, s.node_id)


@dataclass
class Result:
    n: int
    udp_bps: float
    tcp_bps: float
    busiest_bps: float
    state_bytes: dict[str, float]
    propagation_s: list[float]
    freshness_s: list[float]
    cpu_ms_per_node_s: float
    wall_s: float


def _engine_urls(m: int) -> list[str]:
    return [f"http://engine-{i}:8000" for i in range(m)]


def run(
    n: int,
    engines: int,
    rps: float,
    new_hashes: int,
    window_s: float,
    probe_every_s: float,
    with_cache: bool,
    seed: int,
    encoding: str = "delta",
) -> Result:
    t_wall = time.perf_counter()
    net = ScaleNet(seed, with_cache, encoding, rate_limit=RateLimitSpec(limit=10_000, window_s=1.0))
    net.cluster(n)
    if not net.run_until(statenet.CONVERGE_S * 4, lambda: statenet.all_alive(net)):
        raise SystemExit(f"n={n}: the cluster did not converge")
    urls = _engine_urls(engines)
    for url in urls:  # one operator's POST /workers on n0: one owner of every record
        net.add_worker("n0", url, {"url": url, "model": "m"})
    net.run_until(net.now + 10.0)
    rng = random.Random(seed)
    recent = {(a, u): [rng.randbytes(8) for _ in range(1024)] for a in net.state for u in urls}

    def publish(addr: str) -> None:
        for url in urls:
            hashes = recent[(addr, url)]
            hashes[:0] = [rng.randbytes(8) for _ in range(new_hashes)]
            del hashes[cache_summary.MAX_HASHES :]
            net.summaries[addr].publish(url, hashes)

    if with_cache:  # the steady state: every summary full, every ring past its first round
        for _ in range(WARMUP_PUBLISHES):
            for addr in net.state:
                publish(addr)
        net.run_until(net.now + 10.0)

    before = {k: dict(v) for k, v in net.bytes_out.items()}
    cpu0 = time.process_time()
    t0 = net.now
    step = 1.0 / max(rps, 1.0)
    next_publish = t0
    next_probe = t0 + 1.0
    fresh: list[tuple[bytes, float]] = []  # hashes n0 published, not yet everywhere
    freshness: list[float] = []
    owner0, url0 = net.state["n0"].node_id, urls[0]
    keys0 = summary_keys(owner0, url0, encoding)

    def everywhere(h: bytes) -> bool:
        for s in net.running():
            if s.node_id == owner0:
                continue
            cache = s.replicas[CACHE]
            if not any(h in (cache.get(k) or b"") for k in keys0):
                return False
        return True

    probes: list[tuple[str, float]] = []
    probed = 0
    propagation: list[float] = []
    t = t0
    while t < t0 + window_s:
        t += step
        net.run_until(t)
        for s in net.running():  # one request per node per step through the rate limiter
            net.acquire(s.addr, "tenant")
        if with_cache and t >= next_publish:
            next_publish += PUBLISH_S
            for addr in net.state:
                publish(addr)
            fresh.append((recent[("n0", url0)][0], net.now))
        probe_cpu = time.process_time()  # the bench's own reading, not the nodes' CPU
        for h, at in list(fresh):
            if everywhere(h):
                freshness.append(net.now - at)
                fresh.remove((h, at))
        cpu0 += time.process_time() - probe_cpu
        if t >= next_probe:
            next_probe += probe_every_s
            url = f"http://probe-{probed}:8000"
            probed += 1
            net.add_worker("n0", url, {"url": url, "model": "m"})
            probes.append((url, net.now))
        for url, at in list(probes):
            if all(url in s.directory.effective() for s in net.running()):
                propagation.append(net.now - at)
                probes.remove((url, at))
    cpu = time.process_time() - cpu0
    udp = [net.bytes_out[k]["udp"] - before.get(k, {}).get("udp", 0) for k in net.nodes]
    tcp = [net.bytes_out[k]["tcp"] - before.get(k, {}).get("tcp", 0) for k in net.nodes]
    per_node = [(u + c) / window_s for u, c in zip(udp, tcp, strict=True)]
    for url, at in probes:  # adds still in flight at the end of the window
        net.run_until(
            at + 60.0, lambda u=url: all(u in s.directory.effective() for s in net.running())
        )
        propagation.append(net.now - at)
    sizes: dict[str, float] = {}
    for name in net.state["n0"].replicas:
        sizes[name] = statistics.mean(
            s.replicas[name].stats()["state_bytes"] for s in net.running()
        )
    return Result(
        n=n,
        udp_bps=sum(udp) / n / window_s,
        tcp_bps=sum(tcp) / n / window_s,
        busiest_bps=max(per_node),
        state_bytes=sizes,
        propagation_s=propagation,
        freshness_s=freshness,
        cpu_ms_per_node_s=cpu * 1000 / (n * window_s),
        wall_s=time.perf_counter() - t_wall,
    )


def _kb(x: float) -> str:
    return f"{x / 1024:,.1f}"


def _p50_max(xs: list[float]) -> str:
    xs = sorted(xs)
    if not xs:
        return "-"
    return f"{xs[len(xs) // 2]:.2f} / {xs[-1]:.2f}"


def report(r: Result, encoding: str) -> str:
    docs = ", ".join(f"{k} {_kb(v)}" for k, v in r.state_bytes.items())
    return (
        f"| {r.n} | {encoding} | {_kb(r.udp_bps)} | {_kb(r.tcp_bps)} | {_kb(r.busiest_bps)} | "
        f"{docs} | {_p50_max(r.propagation_s)} | {_p50_max(r.freshness_s)} | "
        f"{r.cpu_ms_per_node_s:.1f} | {r.wall_s:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--engines", type=int, default=8, help="engines every node routes to")
    ap.add_argument("--rps", type=float, default=50.0, help="requests/s per node")
    ap.add_argument("--new-hashes", type=int, default=32, help="new prefixes/s per engine")
    ap.add_argument("--window", type=float, default=10.0, help="simulated seconds measured")
    ap.add_argument("--probe-every", type=float, default=2.0)
    ap.add_argument("--no-cache", action="store_true", help="no cache summaries")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--encoding",
        nargs="+",
        choices=("delta", "whole"),
        default=["delta"],
        help="cache summaries: delta (slot ring, the node's) or whole (before change 2)",
    )
    args = ap.parse_args(argv)
    print(
        f"engines {args.engines}, {args.rps:g} req/s per node, "
        f"cache summaries {'off' if args.no_cache else f'on ({args.new_hashes} new hashes/s)'}, "
        f"{args.window:g} simulated s, seed {args.seed}\n"
    )
    print(
        "| nodes | encoding | UDP KB/s/node | TCP KB/s/node | busiest KB/s | documents KB/node "
        "| add seen everywhere p50/max s | hint everywhere p50/max s | CPU ms per node-s "
        "| wall s |"
    )
    print("|---:|---|---:|---:|---:|---|---|---|---:|---:|")
    for n in args.n:
        for encoding in args.encoding:
            r = run(
                n,
                args.engines,
                args.rps,
                args.new_hashes,
                args.window,
                args.probe_every,
                not args.no_cache,
                args.seed,
                encoding,
            )
            print(report(r, encoding), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
