"""Start-to-ready: a gateway started before its engines (as compose or Kubernetes start them).

Starts our gateway (`smg launch`, the default health settings: a 60 s interval, two good checks
needed) in front of a gRPC engine and an HTTP worker that are not up yet, waits `--lead` seconds
(1 s by default), then starts the engine and the worker (`smg sim --grpc`, `smg sim`), and polls
a chat request to each every 20 ms. Reports, per rep, how long after its own start each worker
was first served, and how long after the gateway's start, and for the HTTP worker how long its
own start took (its /health) and the gateway's lag after that; the median over reps.

    .venv/bin/python bench/start_to_ready.py               # 3 reps, ~1 min
    .venv/bin/python bench/start_to_ready.py --reps 5 --lead 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpc_token_cost import PY, REPO, _free_port, _spawn


async def first_200(base: str, model: str, deadline_s: float) -> float:
    """Poll a chat request for `model` until it is answered 200; the monotonic time then."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    end = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < end:
            try:
                async with s.post(f"{base}/v1/chat/completions", json=body) as r:
                    await r.read()
                    if r.status == 200:
                        return time.monotonic()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.02)
    raise TimeoutError(f"{model} not served in {deadline_s} s")


async def own_health(url: str, deadline_s: float) -> float:
    """Poll a worker's own /health until it answers 200; the monotonic time then."""
    end = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < end:
            try:
                async with s.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                    if r.status == 200:
                        return time.monotonic()
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.02)
    raise TimeoutError(f"{url} not up in {deadline_s} s")


async def one_rep(lead_s: float) -> tuple[float, ...]:
    gw_port, engine_port, http_port = _free_port(), _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        t_gw = time.monotonic()
        procs.append(
            _spawn(
                [
                    PY, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(gw_port),
                    "--enable-igw", "--worker-urls", f"grpc://127.0.0.1:{engine_port}",
                    f"http://127.0.0.1:{http_port}", "--log-level", "warn",
                ],
                str(REPO),
                str(REPO),
            )
        )  # fmt: skip
        await asyncio.sleep(lead_s)
        t_up = time.monotonic()
        procs.append(
            _spawn(
                [
                    PY, "-m", "smg", "sim", "--grpc", "--host", "127.0.0.1",
                    "--port", str(engine_port), "--model", "engine-model",
                ],
                str(REPO),
                str(REPO),
            )
        )  # fmt: skip
        procs.append(
            _spawn(
                [
                    PY, "-m", "smg", "sim", "--host", "127.0.0.1", "--port", str(http_port),
                    "--model", "http-model",
                ],
                str(REPO),
                str(REPO),
            )
        )  # fmt: skip
        base = f"http://127.0.0.1:{gw_port}"
        engine, worker, worker_up = await asyncio.gather(
            first_200(base, "engine-model", 60.0),
            first_200(base, "http-model", 60.0),
            own_health(f"http://127.0.0.1:{http_port}/health", 60.0),
        )
        return (
            engine - t_up, worker - t_up, engine - t_gw, worker - t_gw,
            worker_up - t_up, worker - worker_up,
        )  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lead", type=float, default=1.0, help="seconds the gateway starts first")
    args = ap.parse_args()
    rows = [asyncio.run(one_rep(args.lead)) for _ in range(args.reps)]
    names = (
        "gRPC engine: served after its start",
        "HTTP worker: served after its start",
        "gRPC engine: served after the gateway's start",
        "HTTP worker: served after the gateway's start",
        "HTTP worker: its own /health up after its start",
        "HTTP worker: served after its own /health is up",
    )
    print(f"gateway started {args.lead:g} s before its workers; {args.reps} reps (seconds)")
    for i, name in enumerate(names):
        values = [r[i] for r in rows]
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"  {name:48s} median {statistics.median(values):.2f}  ({shown})")


if __name__ == "__main__":
    main()
