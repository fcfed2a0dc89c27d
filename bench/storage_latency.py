"""Storage latency per backend: put_response, get_response and add_items (one item) + list_items
(a page of 20), p50/p99/max in µs, sequential on one connection's worth of work.

Records are shaped like a three-turn Responses chain (a few input messages, a function call and a
reply; ~2 KB of JSON). memory and sqlite (a temp file) always run; postgres and redis run when
given a URL of a server you started (the bench starts nothing):

    .venv/bin/python bench/storage_latency.py
    .venv/bin/python bench/storage_latency.py --n 5000 \\
        --postgres-url postgresql://postgres@127.0.0.1:5432/postgres --redis-url redis://127.0.0.1:6379/0

Prints one JSON line per backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from smg.storage.contract import Conversation, ListQuery, Storage, StoredResponse


def percentiles(samples_s: list[float]) -> dict[str, float]:
    """p50 / p99 / max of the samples, in µs (nearest-rank)."""
    if not samples_s:
        return {"p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
    s = sorted(samples_s)

    def rank(q: float) -> float:
        return round(s[min(len(s) - 1, max(0, int(q * len(s) + 0.5) - 1))] * 1e6, 1)

    return {"p50_us": rank(0.50), "p99_us": rank(0.99), "max_us": round(s[-1] * 1e6, 1)}


def record(i: int) -> StoredResponse:
    text = "lorem ipsum dolor sit amet " * 8
    return StoredResponse(
        id=f"resp_{i:08d}",
        tenant="bench",
        created_at=1_700_000_000 + i,
        status="completed",
        model="bench-model",
        input_items=tuple(
            {
                "id": f"msg_{i}_{k}",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
            for k in range(4)
        ),
        output_items=(
            {"id": f"fc_{i}", "type": "function_call", "name": "lookup", "arguments": "{}"},
            {
                "id": f"msg_out_{i}",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
        ),
        previous_response_id=f"resp_{i - 1:08d}" if i else None,
        usage={"input_tokens": 120, "output_tokens": 60},
    )


async def timed(samples: list[float], call: Callable[[], Awaitable[Any]]) -> None:
    t0 = time.perf_counter()
    await call()
    samples.append(time.perf_counter() - t0)


async def measure(store: Storage, n: int) -> dict[str, Any]:
    put: list[float] = []
    get: list[float] = []
    add: list[float] = []
    page: list[float] = []
    await store.create_conversation(Conversation("conv_bench", "bench", 0))
    for i in range(n):
        r = record(i)
        await timed(put, lambda r=r: store.put_response(r))  # type: ignore[misc]
        await timed(get, lambda r=r: store.get_response("bench", r.id))  # type: ignore[misc]
        item = {"id": f"it_{i}", "type": "message", "role": "user", "content": []}
        await timed(add, lambda item=item: store.add_items("bench", "conv_bench", [item]))  # type: ignore[misc]
        await timed(page, lambda: store.list_items("bench", "conv_bench", ListQuery(limit=20)))
    return {
        "put_response": percentiles(put),
        "get_response": percentiles(get),
        "add_item": percentiles(add),
        "list_items_20": percentiles(page),
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="operations of each kind per backend")
    p.add_argument("--postgres-url", help="also measure postgres on this (empty-able) database")
    p.add_argument("--redis-url", help="also measure redis on this server")
    args = p.parse_args()

    from smg.storage.memory import MemoryStorage
    from smg.storage.sqlite import SqliteStorage

    openers: dict[str, Callable[[], Awaitable[Storage]]] = {}

    async def memory() -> Storage:
        return MemoryStorage()

    openers["memory"] = memory
    tmp = tempfile.TemporaryDirectory()
    openers["sqlite"] = lambda: SqliteStorage.open(str(Path(tmp.name) / "bench.db"))
    if args.postgres_url:
        from smg.storage.postgres import PostgresStorage

        openers["postgres"] = lambda: PostgresStorage.open(args.postgres_url)
    if args.redis_url:
        from smg.storage.redis import RedisStorage

        openers["redis"] = lambda: RedisStorage.open(
            args.redis_url, prefix=f"bench{time.time_ns()}:", retention_days=1
        )
    try:
        for name, opener in openers.items():
            store = await opener()
            try:
                result = await measure(store, args.n)
            finally:
                await store.close()
            print(json.dumps({"backend": name, "n": args.n, **result}), flush=True)
    finally:
        tmp.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
