"""Gateway CPU per request: a Responses request against the same chat request (gRPC mode).

Starts one `smg sim --grpc --runtime vllm --chunk-tokens 1` engine (unpaced) and our gateway in
front of it (the bundled Qwen3 tokenizer), as subprocesses on 127.0.0.1; per rep drives N
requests at a fixed concurrency from this process (aiohttp) in each mode, interleaved, and
reports the gateway's CPU (user+sys of all its threads, psutil) per request. The engine says the
same scripted reply (`SIM_REPLY:`) to both surfaces, so both decode the same tokens:

    chat / responses                 whole answers, a short reply (~8 tokens)
    chat_stream / responses_stream   streams, a 64-word reply (one token per engine message)

Responses requests run as clients send them by default (`store: true`: each response is kept in
the gateway's memory store); `--no-store` sends `store: false`. Issue 12's target: at most 1.3x.

    .venv/bin/python bench/responses_cost.py                    # 3 reps, ~1 min
    .venv/bin/python bench/responses_cost.py --reps 5 --conc 1 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpc_token_cost import PY, REPO, _free_port, _spawn, _wait_http

MODEL = "sim-model"
SHORT = "SIM_REPLY: Hello there, how are you doing today?"
LONG = "SIM_REPLY:" + " word" * 64
MODES = ("chat", "responses", "chat_stream", "responses_stream")


def request(mode: str, store: bool) -> tuple[str, dict[str, Any]]:
    """(path, body) of one request in `mode`."""
    text = LONG if mode.endswith("_stream") else SHORT
    stream = mode.endswith("_stream")
    if mode.startswith("chat"):
        body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": stream}
        return "/v1/chat/completions", body
    return "/v1/responses", {"model": MODEL, "input": text, "stream": stream, "store": store}


async def drive(base: str, mode: str, n: int, conc: int, store: bool) -> int:
    path, body = request(mode, store)
    left, done = n, 0

    async def worker(s: aiohttp.ClientSession) -> None:
        nonlocal left, done
        while left > 0:
            left -= 1
            async with s.post(base + path, json=body) as r:
                data = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"{mode}: {r.status} {data[:200]!r}")
                done += 1

    conn = aiohttp.TCPConnector(limit=conc)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        await asyncio.gather(*(worker(s) for _ in range(conc)))
    return done


async def run(args: argparse.Namespace) -> dict[str, list[float]]:
    from smg.sim.tokenizer_files import qwen3_tokenizer_dir

    eport, port, mport = _free_port(), _free_port(), _free_port()
    sim = _spawn(
        [PY, "-m", "smg", "sim", "--grpc", "--runtime", "vllm", "--chunk-tokens", "1",
         "--host", "127.0.0.1", "--port", str(eport), "--model", MODEL],
        str(REPO), str(REPO),
    )  # fmt: skip
    gw = _spawn(
        [PY, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port),
         "--worker-urls", f"grpc://127.0.0.1:{eport}", "--tokenizer-path",
         str(qwen3_tokenizer_dir()), "--policy", "round_robin", "--log-level", "warn",
         "--prometheus-host", "127.0.0.1", "--prometheus-port", str(mport)],
        str(REPO), str(REPO),
    )  # fmt: skip
    results: dict[str, list[float]] = {m: [] for m in MODES}
    base = f"http://127.0.0.1:{port}"
    try:
        await _wait_http(base + "/v1/models", gw)
        for _ in range(240):  # until the engine is healthy behind it
            try:
                await drive(base, "chat", 1, 1, True)
                break
            except RuntimeError:
                await asyncio.sleep(0.25)
        proc = psutil.Process(gw.pid)
        for mode in MODES:  # warm-up
            await drive(base, mode, args.conc * 4, args.conc, not args.no_store)
        for rep in range(args.reps):
            for mode in MODES:
                t0 = proc.cpu_times()
                n = await drive(base, mode, args.requests, args.conc, not args.no_store)
                t1 = proc.cpu_times()
                us = ((t1.user - t0.user) + (t1.system - t0.system)) * 1e6 / n
                results[mode].append(us)
                print(f"rep {rep} {mode}: {us:.0f} CPU-us/request", flush=True)
    finally:
        for p in (gw, sim):
            p.terminate()
            p.wait(10)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--no-store", action="store_true", help="Responses with store: false")
    args = ap.parse_args()
    results = asyncio.run(run(args))
    med = {m: statistics.median(v) for m, v in results.items()}
    print("\n| mode | chat CPU-us/req | responses CPU-us/req | ratio |")
    print("| --- | --- | --- | --- |")
    for chat, resp in (("chat", "responses"), ("chat_stream", "responses_stream")):
        ratio = med[resp] / med[chat]
        print(f"| {chat} | {med[chat]:.0f} | {med[resp]:.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
