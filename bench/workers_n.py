#!/usr/bin/env python3
"""`--workers 1` against `--workers 2` side by side (issue 15's must-show for "every core used").

For each rep, in alternating order, starts 2 `smg sim` workers and `smg launch --workers N` in
front of them (bench/procs.py's Stack, `--history-backend none`), then measures:

- CPU per request: closed-loop non-streaming chats (wrk when installed, else aiohttp) at
  --conc for --duration s; the gateway's CPU (the parent and all its children) / requests;
- each process's share of the requests (`smg_http_requests_total{process=...}`);
- cache-aware affinity on a shared-prefix workload: --groups conversations, each a long shared
  prefix plus a fresh question, sent round-robin over fresh connections (so the kernel spreads
  them over the processes); a request "hits" when it lands on the worker that served that
  conversation's previous request (the worker is told by the sim's response id tag), which is
  what an engine's prefix cache would reward; with it, the share of those requests each worker
  took (a new conversation's worker is chosen by hashing its opening when processes share the
  workers, so the split is the hash's over --groups conversations, not an even one).

    .venv/bin/python bench/workers_n.py --reps 2 --duration 5

Numbers are local to the machine (on a 2-core box the gateway, the workers and the load
generator share the cores, so raw scaling cannot show: compare CPU per request).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import body_for, run_load
from procs import MODEL, Stack, cpu_s, host_busy_s

HERE = Path(__file__).resolve().parent
PATH = "/v1/chat/completions"


def metrics(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def wait_processes(stack: Stack, n: int, mport: int) -> None:
    deadline = time.monotonic() + 60
    while n > 1 and time.monotonic() < deadline:
        try:
            if f"smg_gateway_processes {n}" in metrics(f"http://127.0.0.1:{mport}/metrics"):
                return
        except OSError:
            pass
        time.sleep(0.2)
    # every process serving: its workers' first health checks passed (20 answers in a row)
    ok, deadline = 0, time.monotonic() + 30
    while ok < 20 and time.monotonic() < deadline:
        body = body_for("chat").encode()
        req = urllib.request.Request(
            stack.gateway_url + PATH, body, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                ok = ok + 1 if r.status == 200 else 0
        except OSError:
            ok = 0
            time.sleep(0.1)


def shares(mport: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in metrics(f"http://127.0.0.1:{mport}/metrics").splitlines():
        if line.startswith("smg_http_requests_total{") and PATH in line:
            proc = line.split('process="')[1].split('"')[0] if 'process="' in line else "0"
            out[proc] = out.get(proc, 0.0) + float(line.rsplit(" ", 1)[1])
    total = sum(out.values()) or 1.0
    return {p: round(v / total, 3) for p, v in sorted(out.items())}


def affinity(url: str, groups: int, per_group: int, seed: int) -> tuple[float, list[float]]:
    rng = random.Random(seed)
    prefixes = [f"conversation {g}: " + " ".join(f"w{rng.random():.6f}" for _ in range(300))
                for g in range(groups)]  # fmt: skip
    last: dict[int, str] = {}
    served: dict[str, int] = {}
    hits = tries = 0
    for i in range(groups * per_group):
        g = i % groups
        body = {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": prefixes[g]},
                {"role": "user", "content": f"question {i}"},
            ],
            "max_tokens": 2,
        }
        req = urllib.request.Request(
            url + PATH, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        tag = ""
        for _ in range(5):  # a 503 (a process whose workers are not ready yet): again, counted
            try:
                with urllib.request.urlopen(req, timeout=10) as r:  # a fresh connection each
                    tag = json.loads(r.read())["id"].split("-")[1][:8]
                break
            except urllib.error.HTTPError as err:
                print(f"affinity request {i}: {err.code} {err.read()[:200]!r}", file=sys.stderr)
                time.sleep(0.2)
        served[tag] = served.get(tag, 0) + 1
        if g in last:
            tries += 1
            hits += last[g] == tag
        last[g] = tag
    total = sum(served.values()) or 1
    split = sorted((round(v / total, 2) for v in served.values()), reverse=True)
    return hits / max(1, tries), split


def run_one(n: int, a: argparse.Namespace, rep: int) -> list[dict]:
    logdir = a.out / f"workers{n}-rep{rep}"
    args = ["--workers", str(n), "--history-backend", "none"]
    with Stack(2, "cache_aware", args, 0.0, logdir) as stack:
        mport = int(stack.gateway.args[stack.gateway.args.index("--prometheus-port") + 1])
        wait_processes(stack, n, mport)
        hit, split = affinity(stack.gateway_url, a.groups, a.per_group, seed=rep)
        rows = []
        snap: dict[str, float] = {}

        def start() -> None:
            snap.update(cpu=cpu_s([stack.gateway.pid]), busy=host_busy_s())

        for conc in a.conc:
            load = run_load(
                a.client, stack.gateway_url + PATH, body_for("chat"), conc, a.duration, 1.0, start
            )
            cpu = cpu_s([stack.gateway.pid]) - snap["cpu"]
            busy = host_busy_s() - snap["busy"]
            rows.append(
                {
                    "workers": n,
                    "rep": rep,
                    "conc": conc,
                    "requests": load.requests,
                    "errors": load.errors,
                    "req_s": round(load.requests / load.elapsed_s, 1),
                    "cpu_us_per_req": round(cpu / max(1, load.requests) * 1e6, 1),
                    # the gateway's cores, and the whole box's, while the load ran
                    "gateway_cores": round(cpu / load.elapsed_s, 2),
                    "box_cores": round(busy / load.elapsed_s, 2),
                    "shares": shares(mport),
                    "hit_rate": round(hit, 3),
                    "worker_split": split,
                }
            )
        return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument(
        "--conc", type=lambda v: [int(c) for c in v.split(",")], default=[16], help="e.g. 1,16,64"
    )
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--per-group", type=int, default=10)
    p.add_argument("--client", default="wrk" if shutil.which("wrk") else "aiohttp")
    p.add_argument("--out", type=Path, default=HERE / "results" / f"workers_n-{int(time.time())}")
    a = p.parse_args()
    rows = []
    for rep in range(a.reps):
        for n in (1, 2) if rep % 2 == 0 else (2, 1):
            for row in run_one(n, a, rep):
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(
        "\n| --workers | conc | req/s | CPU-µs/req | gateway cores | box cores | errors | shares "
        "| hit rate | worker split |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for r in sorted(rows, key=lambda r: (r["conc"], r["workers"], r["rep"])):
        print(
            f"| {r['workers']} | {r['conc']} | {r['req_s']} | {r['cpu_us_per_req']} "
            f"| {r['gateway_cores']} | {r['box_cores']} | {r['errors']} | {r['shares']} "
            f"| {r['hit_rate']} | {r['worker_split']} |"
        )
    for conc in a.conc:
        at = [r for r in rows if r["conc"] == conc]
        one = [r["cpu_us_per_req"] for r in at if r["workers"] == 1]
        two = [r["cpu_us_per_req"] for r in at if r["workers"] == 2]
        print(f"c={conc} cpu_us_per_req: workers 2 / workers 1 = {mean(two) / mean(one):.2f}")
    one = [r["hit_rate"] for r in rows if r["workers"] == 1]
    two = [r["hit_rate"] for r in rows if r["workers"] == 2]
    print(f"hit_rate: workers 2 / workers 1 = {mean(two) / mean(one):.2f}")


if __name__ == "__main__":
    main()
