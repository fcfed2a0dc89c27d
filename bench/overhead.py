#!/usr/bin/env python3
"""What our gateway costs on top of its backend, with nothing but this repo installed.

Starts `smg sim` workers (zero latency unless --tokens-per-second) and `smg launch` in front of
them on 127.0.0.1 (free ports), then drives closed-loop load at each concurrency with wrk when it
is installed (else an aiohttp client in a separate process), through the gateway and straight to
the first worker, back to back, the order swapped every rep. Reports, as markdown: req/s, p50/p99,
gateway CPU-µs per request (user+system CPU of the gateway process during the run / requests),
CPU-µs per streamed chunk ((stream - non-stream µs/req) / 64), added p50 at c=1 (gateway - direct,
paired per rep) and the gateway's peak RSS. Every run is bounded (--duration, --max-total-s); all
processes it starts are stopped on exit, Ctrl-C included.

    .venv/bin/python bench/overhead.py                       # ~2 min: 1 rep, c=1,16,64,256
    .venv/bin/python bench/overhead.py --reps 3 --duration 5 # medians of 3 paired reps, ~5 min
    .venv/bin/python bench/overhead.py --conc 64 --modes chat --profile 15  # py-spy the gateway

Raw JSON lines and the summary go to bench/results/ (gitignored) unless --out says otherwise.
Numbers are local to the machine: compare the gateway with `direct` from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import STREAM_TOKENS, Load, body_for, run_load
from procs import Stack, cpu_s, host_busy_s
from stacks import parse, render, summarise

HERE = Path(__file__).resolve().parent
MODES = ("chat", "chat_stream")
PATH = "/v1/chat/completions"
TARGETS = ("ours", "direct")  # through our gateway; straight to the first worker


def measure(stack: Stack, target: str, mode: str, conc: int, a: argparse.Namespace) -> dict:
    stack.check_alive()
    url = (stack.gateway_url if target == "ours" else stack.worker_urls[0]) + PATH
    gw, workers = stack.gateway.pid, [w.pid for w in stack.workers]
    snap: dict[str, float] = {}

    def start() -> None:  # called by the load driver right before the timed window
        snap.update(gw=cpu_s([gw]), wk=cpu_s(workers), host=host_busy_s(), t=time.monotonic())
        stack.rss.reset()

    res: Load = run_load(
        a.client, url, body_for(mode), conc, a.duration, a.warmup, start, timeout_s=a.timeout
    )
    wall = time.monotonic() - snap["t"]
    stack.check_alive()  # a worker killed mid-run would show up as fast errors, not as a cost
    gw_cpu = cpu_s([gw]) - snap["gw"]
    wk_cpu = cpu_s(workers) - snap["wk"]
    host = host_busy_s() - snap["host"]
    n = max(res.requests, 1)
    row = {
        "target": target,
        "mode": mode,
        "conc": conc,
        "client": res.client,
        "requests": res.requests,
        "errors": res.errors,
        "rps": res.requests / res.elapsed_s,
        "p50_ms": res.p50_ms,
        "p99_ms": res.p99_ms,
        "worker_cpu_pct": 100 * wk_cpu / wall,
        "client_cpu_pct": 100 * res.client_cpu_s / wall,
        "host_busy_pct": 100 * host / wall,
        "ts": time.time(),
    }
    if target == "ours":
        row |= {
            "gw_cpu_pct": 100 * gw_cpu / wall,
            "gw_us_per_req": 1e6 * gw_cpu / n,
            "gw_rss_mb": stack.rss.peak_mb(),
        }
    own = gw_cpu if target == "ours" else 0.0
    row["foreign_cpu_pct"] = 100 * (host - own - wk_cpu - res.client_cpu_s) / wall
    return row


def run_matrix(stack: Stack, a: argparse.Namespace, out: Path, rows: list[dict]) -> None:
    """Append one row per run to `rows` and to `out` (JSON lines) as it is measured."""
    deadline = time.monotonic() + a.max_total_s
    with out.open("a") as fo:
        for rep in range(a.reps):
            order = TARGETS if rep % 2 == 0 else TARGETS[::-1]
            for mode in a.modes:
                for conc in a.conc:
                    for target in order:
                        if time.monotonic() + a.duration + a.warmup > deadline:
                            print("--max-total-s reached; stopping early", file=sys.stderr)
                            return
                        row = measure(stack, target, mode, conc, a) | {"rep": rep}
                        rows.append(row)
                        fo.write(json.dumps(row) + "\n")
                        fo.flush()
                        us = row.get("gw_us_per_req")
                        gw = f" gw {us:.0f} µs/req" if us is not None else ""
                        print(
                            f"rep{rep} {mode:11s} c={conc:<3d} {row['target']:6s} "
                            f"{row['rps']:7.0f} req/s p50 {row['p50_ms']:6.2f} ms{gw} "
                            f"foreign {row['foreign_cpu_pct']:.0f}% err {row['errors']}",
                            file=sys.stderr,
                            flush=True,
                        )


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summary(rows: list[dict], meta: str) -> str:
    f = lambda x, p=0: "-" if x != x else f"{x:.{p}f}"  # noqa: E731
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["mode"], r["conc"], r["target"]), []).append(r)
    direct = {(r["mode"], r["conc"], r["rep"]): r for r in rows if r["target"] == "direct"}
    out = [
        meta,
        "",
        "| mode | conc | target | n | req/s | p50 ms | p99 ms | +p50 ms | gw CPU% | "
        "gw µs/req | gw RSS MB | worker CPU% | foreign CPU% | errors |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(by, key=lambda k: (MODES.index(k[0]), k[1], k[2] != "direct")):
        g, (mode, conc, tgt) = by[key], key
        d = [
            r["p50_ms"] - direct[(mode, conc, r["rep"])]["p50_ms"]
            for r in g
            if tgt != "direct" and (mode, conc, r["rep"]) in direct
        ]
        out.append(
            f"| {mode} | {conc} | {tgt} | {len(g)} | {_med([r['rps'] for r in g]):.0f} | "
            f"{_med([r['p50_ms'] for r in g]):.2f} | {_med([r['p99_ms'] for r in g]):.2f} | "
            f"{f(_med(d), 2) if d else '-'} | {f(_med([r.get('gw_cpu_pct', _NAN) for r in g]))} | "
            f"{f(_med([r.get('gw_us_per_req', _NAN) for r in g]))} | "
            f"{f(max([r.get('gw_rss_mb', _NAN) for r in g]))} | "
            f"{f(_med([r['worker_cpu_pct'] for r in g]))} | "
            f"{f(_med([r['foreign_cpu_pct'] for r in g]))} | {sum(r['errors'] for r in g)} |"
        )
    out += [
        "",
        f"Gateway cost per request and per streamed chunk ({STREAM_TOKENS} chunks/stream)",
        "",
        "| conc | µs/req chat | µs/req stream | µs/chunk | +p50 ms chat | +p50 ms stream |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for conc in sorted({r["conc"] for r in rows}):
        us = {m: _med([r["gw_us_per_req"] for r in by.get((m, conc, "ours"), [])]) for m in MODES}
        dp = {}
        for m in MODES:
            dp[m] = _med(
                [
                    r["p50_ms"] - direct[(m, conc, r["rep"])]["p50_ms"]
                    for r in by.get((m, conc, "ours"), [])
                    if (m, conc, r["rep"]) in direct
                ]
            )
        chunk = (us["chat_stream"] - us["chat"]) / STREAM_TOKENS
        out.append(
            f"| {conc} | {f(us['chat'])} | {f(us['chat_stream'])} | {f(chunk, 1)} | "
            f"{f(dp['chat'], 2)} | {f(dp['chat_stream'], 2)} |"
        )
    rss = max([r["gw_rss_mb"] for r in rows if "gw_rss_mb" in r] or [_NAN])
    out.append(f"\nGateway peak RSS: {f(rss)} MB")
    return "\n".join(out) + "\n"


_NAN = float("nan")


def profile(stack: Stack, a: argparse.Namespace, stamp: str) -> None:
    """py-spy the gateway for `a.profile` seconds under load; write raw stacks and a summary."""
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    spy = shutil.which("py-spy", path=search)
    if spy is None:
        sys.exit("py-spy not found: pip install py-spy")
    mode, conc = a.modes[0], a.conc[0]
    raw = Path(a.results) / f"profile-{mode}-c{conc}-{stamp}.txt"
    cmd = [spy, "record", "-p", str(stack.gateway.pid), "-d", str(a.profile), "-r", str(a.rate),
           "--format", "raw", "-o", str(raw)] + (["--native"] if a.native else [])  # fmt: skip
    spies: list[subprocess.Popen[bytes]] = []
    with open(raw.with_suffix(".log"), "wb") as log:

        def start() -> None:  # the load is warm: start sampling
            spies.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))

        url = stack.gateway_url + PATH
        res = run_load(a.client, url, body_for(mode), conc, a.profile + 1, a.warmup, start)
        try:
            spies[0].wait(timeout=30)
        finally:
            if spies[0].poll() is None:
                spies[0].kill()
                spies[0].wait()
    if not raw.exists():
        sys.exit(f"py-spy wrote nothing; see {raw.with_suffix('.log')}")
    stack.check_alive()
    rps = res.requests / res.elapsed_s
    print(f"profiled {mode} c={conc}: {rps:.0f} req/s; raw: {raw}", file=sys.stderr)
    with raw.open() as fh:
        text = render(summarise(parse(fh)), a.top)
    raw.with_suffix(".md").write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    csv_int = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--conc", type=csv_int, default=[1, 16, 64, 256], help="e.g. 1,16,64,256")
    ap.add_argument(
        "--modes",
        type=lambda s: s.split(","),
        default=list(MODES),
        help="chat (max_tokens 8), chat_stream (max_tokens 64)",
    )
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each run")
    ap.add_argument("--reps", type=int, default=1, help="paired reps (3 for medians)")
    ap.add_argument("--workers", type=int, default=1, help="smg sim workers behind the gateway")
    ap.add_argument(
        "--tokens-per-second",
        type=float,
        default=0.0,
        help="sim decode speed; 0: no delay, and the sim writes 64 chunks per write; "
        ">0 (e.g. 1e6) makes it write each chunk on its own",
    )
    ap.add_argument("--policy", default="round_robin")
    ap.add_argument(
        "--gateway-args",
        default="",
        help="extra flags for `smg launch`",
    )
    ap.add_argument(
        "--api-key",
        default=None,
        help="measure the authenticated path: the gateway gets --api-key, the clients send it",
    )
    ap.add_argument("--client", choices=("auto", "wrk", "aiohttp"), default="auto")
    ap.add_argument("--timeout", type=float, default=10.0, help="per-request timeout, s")
    ap.add_argument("--max-total-s", type=float, default=900.0, help="bound on the whole matrix")
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--out", default=None, help="JSON lines file (default results/overhead-*)")
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="SECONDS",
        help="instead of the matrix: py-spy the gateway under the first mode/conc",
    )
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    if a.client == "auto":
        a.client = "wrk" if shutil.which("wrk") else "aiohttp"
    for m in a.modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    Path(a.results).mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(a.out) if a.out else Path(a.results) / f"overhead-{stamp}.jsonl"
    meta = (
        f"smg overhead: {a.client} client, {a.workers} sim worker(s), policy {a.policy}, "
        f"{a.duration:g} s runs after {a.warmup:g} s warm-up, {a.reps} rep(s), "
        f"sim tokens/s {a.tokens_per_second:g}, {psutil.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print(meta, file=sys.stderr)
    gateway_args = a.gateway_args.split()
    if a.api_key:  # the load drivers (wrk's script, the aiohttp client process) read this
        gateway_args += ["--api-key", a.api_key]
        os.environ["BENCH_AUTHORIZATION"] = f"Bearer {a.api_key}"
    with Stack(
        a.workers, a.policy, gateway_args, a.tokens_per_second, Path(a.results) / "logs"
    ) as stack:
        if a.profile > 0:
            profile(stack, a, stamp)
            return
        rows: list[dict] = []
        failure = None
        try:
            run_matrix(stack, a, out, rows)
        except RuntimeError as exc:  # a process died or wrk failed: report what was measured
            failure = exc
    text = summary(rows, meta)
    out.with_suffix(".md").write_text(text)
    print(text)
    print(f"raw: {out}  summary: {out.with_suffix('.md')}", file=sys.stderr)
    if failure is not None:
        sys.exit(f"stopped early: {failure}")


if __name__ == "__main__":
    main()
