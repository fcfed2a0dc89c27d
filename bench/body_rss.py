#!/usr/bin/env python3
"""What buffering a request body costs the gateway in RSS.

Starts one `smg sim` worker (slow enough that each request stays in flight for a while) and
`smg launch` in front of it, then sends chat requests whose one message is `--sizes` MB of text,
first one at a time, then `--concurrent` at once, and reports the gateway's RSS before, its peak
while the request(s) were in flight, and what it keeps afterwards. A request the gateway refuses
(413, 503) is reported with its status: then the peak shows what refusing cost.

    .venv/bin/python bench/body_rss.py
    .venv/bin/python bench/body_rss.py --sizes 1 8 32 --concurrent 3 --concurrent-mb 100
    .venv/bin/python bench/body_rss.py --gateway-args --max-payload-size 600000000
"""

from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.procs import MODEL, RssSampler, Stack


def body_of(mb: float) -> bytes:
    n = int(mb * 2**20)
    head = b'{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"' % MODEL.encode()
    tail = b'"}]}'
    return head + b"x" * max(0, n - len(head) - len(tail)) + tail


def post(url: str, body: bytes) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0  # the gateway cut the connection (before reading the whole body)
    finally:
        conn.close()


def rss_mb(sampler: RssSampler) -> float:
    sampler.peak = 0
    return sampler.peak_mb()


def measure(stack: Stack, mb: float, n: int) -> tuple[float, float, float, list[int]]:
    body = body_of(mb)
    before = rss_mb(stack.rss)
    stack.rss.reset()
    statuses: list[int] = []
    threads = [
        threading.Thread(target=lambda: statuses.append(post(stack.gateway_url, body)))
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = stack.rss.peak_mb()
    time.sleep(1.0)
    after = rss_mb(stack.rss)
    return before, peak, after, statuses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="*", default=[1, 8, 16, 32, 60])
    ap.add_argument("--concurrent", type=int, default=3)
    ap.add_argument("--concurrent-mb", type=float, default=100)
    ap.add_argument("--tokens-per-second", type=float, default=4.0)
    ap.add_argument("--gateway-args", nargs=argparse.REMAINDER, default=[])
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        Stack(1, "round_robin", args.gateway_args, args.tokens_per_second, Path(tmp)) as stack,
    ):
        stack.rss.interval_s = 0.02
        head = f"{'MB':>6} {'n':>2} {'before':>8} {'peak':>8} {'after':>8} {'peak-before':>12}"
        print(head + "  status")
        runs = [(mb, 1) for mb in args.sizes]
        if args.concurrent:
            runs.append((args.concurrent_mb, args.concurrent))
        for mb, n in runs:
            before, peak, after, statuses = measure(stack, mb, n)
            print(
                f"{mb:6g} {n:2d} {before:8.1f} {peak:8.1f} {after:8.1f} {peak - before:12.1f}"
                f"  {sorted(statuses)}",
                flush=True,
            )
            stack.check_alive()


if __name__ == "__main__":
    main()
