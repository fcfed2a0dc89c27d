#!/usr/bin/env python3
"""Event-loop stall while `CacheIndexActor` evicts a large cache-aware prefix tree.

Builds a `CacheIndex` (the state the actor owns, read by a `CacheAwarePolicy`) holding `--n`
prefixes (random token ids or text, round-robin over 4 workers), then asks the cache-index actor
for one eviction pass to `--keep` of each worker's size while two things run on the same loop:

- a ticker sleeping 1 ms at a time, recording how late it wakes (the loop's stall);
- a request task calling `policy.select` (the request path: a match, its decision into the
  actor's lane, which the actor records between slices) then `sleep(0)`.

Reports the ticker's lag p50/p99/max during the pass, the actor's longest eviction slice, the
pass's wall time, the elements freed and how many requests were routed while the pass ran (a
handful means the pass blocked the loop). With 100k nodes alive, the lag max also catches the
cyclic GC's full collections walking the tree (~0.1-0.2 s each here), which no slicing avoids.

    .venv/bin/python bench/evict_lag.py                    # 100k token keys
    .venv/bin/python bench/evict_lag.py --kind str --n 100000 --reps 3
    .venv/bin/python bench/evict_lag.py --gc-off           # the slices alone, without the GC
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from smg.actors.cache_index import CacheIndex, CacheIndexActor, Evict
from smg.actors.runtime import ActorCell
from smg.config import RoutingConfig
from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.policies.cache_aware import CacheAwarePolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_lag import ticker

WORKERS = ("w0", "w1", "w2", "w3")
VOCAB = 151_643


@dataclass(frozen=True, slots=True)
class Cand:
    worker_id: str
    url: str = ""
    load: int = 0


def keys(rng: random.Random, kind: str, n: int, length: int) -> list[str | tuple[int, ...]]:
    if kind == "str":
        letters = string.ascii_letters + string.digits + " "
        return ["".join(rng.choices(letters, k=length)) for _ in range(n)]
    return [tuple(rng.randrange(VOCAB) for _ in range(length)) for _ in range(n)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def one_pass(args: argparse.Namespace, rng: random.Random) -> dict[str, float]:
    t = [0.0]

    def now() -> float:
        t[0] += 1.0
        return t[0]

    # the per-worker bound alone (no byte cap): the pass this bench times
    index = CacheIndex(RoutingConfig(max_tree_bytes=1 << 40))
    policy = CacheAwarePolicy(
        cache_threshold=0.5,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        now=now,
        state=index.state,
        recorder=index.lane,
    )
    tree = index.state.tree("m")
    for i, k in enumerate(keys(rng, args.kind, args.n, args.length)):
        tree.insert(k, WORKERS[i & 3], now())
    bound = int(max(tree.tenant_sizes().values()) * args.keep)
    cfg = RoutingConfig(max_tree_size=bound, max_tree_bytes=1 << 40, eviction_interval_secs=0)
    fresh = keys(rng, args.kind, 2000, args.length)
    cands = [Cand(w) for w in WORKERS]
    gc.collect()

    cell = ActorCell("cache_index", lambda: CacheIndexActor(cfg, index=index))
    lags: list[float] = []
    routed = [0]
    done = asyncio.Event()

    async def requests() -> None:
        i = 0
        while not done.is_set():
            k = fresh[i % len(fresh)]
            req = RouteRequest(text=k, model="m") if isinstance(k, str) else None
            req = req or RouteRequest(tokens=k, model="m")  # type: ignore[arg-type]
            policy.select(cands, req)
            routed[0] += 1
            i += 1
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as tg:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        runner = tg.create_task(cell.run(ready))
        await ready
        await asyncio.sleep(0.02)
        tg.create_task(ticker(lags, done))
        tg.create_task(requests())
        await asyncio.sleep(0.02)
        lags.clear()
        routed[0] = 0
        collections = gc.get_stats()[2]["collections"]
        if args.gc_off:
            gc.disable()
        t0 = time.perf_counter()
        freed = await cell.ref.ask(Evict(), timeout=120.0)
        wall = time.perf_counter() - t0
        gc.enable()
        full_gcs = gc.get_stats()[2]["collections"] - collections
        done.set()
        actor = cell.instance
        cell.ref.stop()
        await runner
    return {
        "slice": getattr(actor, "max_slice_s", wall) * 1e3,
        "slices": float(getattr(actor, "last_pass_slices", 1)),
        "full_gcs": float(full_gcs),
        "p50": pct(lags, 0.5),
        "p99": pct(lags, 0.99),
        "max": max(lags, default=0.0),
        "wall": wall,
        "freed": float(freed),
        "routed": float(routed[0]),
    }


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    print(
        f"{args.n:,} {args.kind} keys of {args.length}, evict to {args.keep:.0%} per worker, "
        f"loop: {type(asyncio.get_running_loop()).__module__}\n"
    )
    print(
        "| rep | lag p50 ms | lag p99 ms | lag max ms | longest slice ms | slices | pass wall s "
        "| freed | routed during | full GCs |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rep in range(args.reps):
        r = await one_pass(args, rng)
        print(
            f"| {rep} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} | {r['slice']:.1f} "
            f"| {r['slices']:,.0f} | {r['wall']:.3f} "
            f"| {r['freed']:,.0f} | {r['routed']:,.0f} | {r['full_gcs']:.0f} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="cached prefixes")
    ap.add_argument("--kind", choices=("tokens", "str"), default="tokens")
    ap.add_argument("--length", type=int, default=200, help="key length (tokens or chars)")
    ap.add_argument("--keep", type=float, default=0.5, help="bound as a share of a worker's size")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-uvloop", action="store_true")
    ap.add_argument("--gc-off", action="store_true", help="no cyclic GC during the pass")
    cli = ap.parse_args()
    if not cli.no_uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    asyncio.run(main(cli))
