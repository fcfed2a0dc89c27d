#!/usr/bin/env python3
"""Closed-loop load: C connections, each sending its next request as soon as the last answer is
in (streams read to the end), for a fixed time after a warm-up.

Two drivers with the same result (`Load`): wrk (C, cheap, preferred) and, when wrk is missing, an
aiohttp client in a separate process (this file run as a script), so the client's CPU never
lands in the process under test. `start()` is called right before the timed window opens, so the
caller can snapshot CPU counters there.

    python bench/loadgen.py URL --conc 16 --duration 5 --warmup 1 --body '{...}'   # the client
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODEL = "fake-model"
STREAM_TOKENS = 64
_PROMPT = [{"role": "user", "content": "Hello, how are you?"}]
_DONE = b"data: [DONE]\n\n"

# POSTs $BODY and prints one JSON line with the counts and latency percentiles.
_WRK_LUA = r"""
wrk.method = "POST"
wrk.body = os.getenv("BODY")
wrk.headers["Content-Type"] = "application/json"
if os.getenv("BENCH_AUTHORIZATION") then
  wrk.headers["Authorization"] = os.getenv("BENCH_AUTHORIZATION")
end
function done(s, lat, req)
  local e = s.errors
  io.write(string.format('LOADJSON {"requests":%d,"duration_us":%d,"errors":%d,' ..
    '"p50_us":%d,"p99_us":%d}\n', s.requests, s.duration,
    e.connect + e.read + e.write + e.status + e.timeout, lat:percentile(50), lat:percentile(99)))
end
"""


def body_for(mode: str) -> str:
    """The bench's two bodies: chat (max_tokens 8) and chat_stream (64 chunks)."""
    if mode == "chat":
        return json.dumps({"model": MODEL, "messages": _PROMPT, "max_tokens": 8})
    if mode == "chat_stream":
        return json.dumps(
            {"model": MODEL, "messages": _PROMPT, "max_tokens": STREAM_TOKENS, "stream": True}
        )
    raise ValueError(mode)


@dataclass(frozen=True, slots=True)
class Load:
    client: str
    requests: int
    errors: int  # socket errors, timeouts, non-2xx, broken streams
    elapsed_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_s: float  # CPU of the load generator during the timed window


def run_load(
    client: str,
    url: str,
    body: str,
    conc: int,
    duration_s: float,
    warmup_s: float,
    start: Callable[[], None],
    *,
    timeout_s: float = 10.0,
) -> Load:
    if client == "wrk":
        return _run_wrk(url, body, conc, duration_s, warmup_s, start, timeout_s)
    return _run_aiohttp(url, body, conc, duration_s, warmup_s, start, timeout_s)


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _wrk_once(lua: str, url: str, body: str, conc: int, seconds: float, timeout_s: float) -> dict:
    secs = max(1, round(seconds))  # wrk takes whole seconds
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{secs}s", f"--timeout={timeout_s:g}s", "-s", lua, url]
    p = subprocess.run(
        cmd,
        env=dict(os.environ, BODY=body),
        capture_output=True,
        text=True,
        timeout=secs + timeout_s + 20,
    )
    for line in p.stdout.splitlines():
        if line.startswith("LOADJSON "):
            return dict(json.loads(line[len("LOADJSON ") :]))
    raise RuntimeError(f"wrk failed (rc {p.returncode}): {p.stdout[-300:]} {p.stderr[-300:]}")


def _run_wrk(
    url: str,
    body: str,
    conc: int,
    duration_s: float,
    warmup_s: float,
    start: Callable[[], None],
    timeout_s: float,
) -> Load:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_WRK_LUA)
    try:
        if warmup_s > 0:
            _wrk_once(f.name, url, body, conc, warmup_s, timeout_s)
        cpu0 = _children_cpu_s()
        start()
        r = _wrk_once(f.name, url, body, conc, duration_s, timeout_s)
        cpu = _children_cpu_s() - cpu0
    finally:
        os.unlink(f.name)
    return Load(
        "wrk",
        r["requests"],
        r["errors"],
        r["duration_us"] / 1e6,
        r["p50_us"] / 1e3,
        r["p99_us"] / 1e3,
        cpu,
    )


def _run_aiohttp(
    url: str,
    body: str,
    conc: int,
    duration_s: float,
    warmup_s: float,
    start: Callable[[], None],
    timeout_s: float,
) -> Load:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        url,
        "--body",
        body,
        "--conc",
        str(conc),
        "--duration",
        str(duration_s),
        "--warmup",
        str(warmup_s),
        "--timeout",
        str(timeout_s),
    ]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdin is not None and p.stdout is not None
        if p.stdout.readline().strip() != "READY":
            raise RuntimeError("load client failed to start")
        start()
        p.stdin.write("GO\n")
        p.stdin.flush()
        line = p.stdout.readline()
        p.wait(timeout=timeout_s + 20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not line:
        raise RuntimeError("load client died")
    r = json.loads(line)
    return Load(
        "aiohttp", r["requests"], r["errors"], r["elapsed_s"], r["p50_ms"], r["p99_ms"], r["cpu_s"]
    )


# --- the aiohttp client process -------------------------------------------------------------------
async def _drive(
    url: str, body: bytes, conc: int, seconds: float, timeout_s: float, lat: list[float] | None
) -> tuple[int, int, float]:
    import aiohttp

    stream = b'"stream": true' in body or b'"stream":true' in body
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    done = errors = 0
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTHORIZATION"):  # overhead.py --api-key
        headers["Authorization"] = os.environ["BENCH_AUTHORIZATION"]
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    conn = aiohttp.TCPConnector(limit=conc)

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        while loop.time() < end:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    data = await r.read()
                ok = r.status == 200 and (not stream or data.endswith(_DONE))
            except (aiohttp.ClientError, TimeoutError, OSError):
                ok = False
            if ok:
                done += 1
                if lat is not None:
                    lat.append(time.perf_counter() - t0)
            else:
                errors += 1

    t0 = loop.time()
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        await asyncio.gather(*(one(session) for _ in range(conc)))
    return done, errors, loop.time() - t0


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def client_main() -> None:
    ap = argparse.ArgumentParser(description="closed-loop aiohttp load client")
    ap.add_argument("url")
    ap.add_argument("--body", required=True)
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    body = a.body.encode()
    if a.warmup > 0:
        asyncio.run(_drive(a.url, body, a.conc, a.warmup, a.timeout, None))
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return
    lat: list[float] = []
    cpu0 = time.process_time()
    done, errors, elapsed = asyncio.run(_drive(a.url, body, a.conc, a.duration, a.timeout, lat))
    cpu = time.process_time() - cpu0
    print(
        json.dumps(
            {
                "requests": done,
                "errors": errors,
                "elapsed_s": elapsed,
                "cpu_s": cpu,
                "p50_ms": 1e3 * _pct(lat, 0.5),
                "p99_ms": 1e3 * _pct(lat, 0.99),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    client_main()
