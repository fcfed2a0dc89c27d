"""Idle cost of a real mesh: N `smg node` processes on loopback, no traffic.

Starts N nodes (127.0.0.(30+i), LAN profile unless --profile), waits until every view holds N
alive members, then measures over --seconds: CPU seconds per node (psutil, all threads) and mesh
bytes sent per node (from /mesh/status). Prints per-node figures and the means.

    python bench/mesh_idle.py --nodes 3 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from procs import REPO, cpu_s, free_port, stop_all


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--profile", default="lan", choices=("lan", "local", "test"))
    ap.add_argument("--logs", default="/tmp/smg-mesh-idle")
    args = ap.parse_args()
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    http_ports: list[int] = []
    mesh_addrs: list[str] = []
    try:
        for i in range(args.nodes):
            host, port, mport = f"127.0.0.{30 + i}", free_port(), free_port()
            argv = [
                sys.executable, "-m", "smg", "node",
                "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", "0",
                "--mesh-host", host, "--mesh-port", str(mport),
                "--mesh-profile", args.profile, "--cluster-key", "bench-mesh-idle-cluster-key",
                "--log-level", "warn",
            ]  # fmt: skip
            if mesh_addrs:
                argv += ["--join", mesh_addrs[0]]
            log = open(Path(args.logs) / f"node{i}.log", "wb")
            procs.append(subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
            http_ports.append(port)
            mesh_addrs.append(f"{host}:{mport}")
        deadline = time.monotonic() + 60
        while True:
            try:
                views = [get(f"http://127.0.0.1:{p}/mesh/status") for p in http_ports]
                if all(
                    sum(m["state"] == "alive" for m in v["members"]) == args.nodes for v in views
                ):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the mesh did not form within 60 s")
            time.sleep(0.2)
        time.sleep(2.0)  # let join chatter settle
        pids = [p.pid for p in procs]
        cpu0 = [cpu_s([pid]) for pid in pids]
        out0 = [
            sum(get(f"http://127.0.0.1:{p}/mesh/status")["bytes_out"].values()) for p in http_ports
        ]
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        cpu1 = [cpu_s([pid]) for pid in pids]
        out1 = [
            sum(get(f"http://127.0.0.1:{p}/mesh/status")["bytes_out"].values()) for p in http_ports
        ]
        cpu_pct = [100 * (b - a) / elapsed for a, b in zip(cpu0, cpu1, strict=True)]
        egress = [(b - a) / elapsed for a, b in zip(out0, out1, strict=True)]
        for i in range(args.nodes):
            print(f"node{i}: cpu {cpu_pct[i]:.2f}% of a core, egress {egress[i]:.0f} B/s")
        print(
            f"mean over {args.nodes} nodes, {elapsed:.0f} s, profile {args.profile}: "
            f"cpu {statistics.mean(cpu_pct):.2f}% of a core, "
            f"egress {statistics.mean(egress):.0f} B/s"
        )
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
