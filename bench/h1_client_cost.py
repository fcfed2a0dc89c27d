"""CPU per upstream request of the data path's HTTP/1.1 client against aiohttp's, in one process.

Both POST the bench's non-streaming chat body to a worker (the shared bench's fake worker, or any
OpenAI-compatible server) at a fixed concurrency, read the whole answer and release the
connection; the process's CPU time per request includes the socket syscalls. Alternates the two,
three rounds each.

    python bench/h1_client_cost.py [--url http://127.0.0.1:18901] [--requests 4000] [--conc 16]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import uvloop
from yarl import URL

from smg.pipeline.backends.h1_client import request_bytes
from smg.pipeline.backends.h1_pool import H1Client, target_of

BODY = (
    b'{"model": "fake-model", "messages": [{"role": "user", "content": "Hello, how are you?"}],'
    b' "max_tokens": 8}'
)
HEADERS = {"Content-Type": "application/json", "X-Request-Id": "bench"}
PATH = "/v1/chat/completions"


async def _run(one: Callable[[], Awaitable[None]], n: int, conc: int) -> None:
    async def worker() -> None:
        for _ in range(n // conc):
            await one()

    await asyncio.gather(*(worker() for _ in range(conc)))


async def main(url: str, n: int, conc: int) -> None:
    client, target = H1Client(), target_of(url)

    async def lean() -> None:
        data = request_bytes("POST", PATH, target.host, HEADERS, BODY)
        resp = await client.request(target, data, 5.0, 30.0)
        await resp.content.read()
        resp.release()

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        auto_decompress=False,
    )
    full, timeout = URL(url + PATH), aiohttp.ClientTimeout(total=30.0, connect=5.0)

    async def aio() -> None:
        resp = await session.post(full, data=BODY, headers=HEADERS, timeout=timeout)
        await resp.content.read()
        resp.release()

    try:
        for name, one in [("lean", lean), ("aiohttp", aio)] * 3:
            await _run(one, n, conc)  # warm: connections open
            t0 = time.process_time()
            await _run(one, n, conc)
            print(f"{name:8} {(time.process_time() - t0) / n * 1e6:6.1f} CPU-us/request")
    finally:
        await session.close()
        client.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:18901")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--conc", type=int, default=16)
    args = ap.parse_args()
    uvloop.run(main(args.url, args.requests, args.conc))
