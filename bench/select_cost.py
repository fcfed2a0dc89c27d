"""What cache-aware routing costs per request, and where its requests go.

One seeded workload (`--prompts` shared prefixes of ~`--length` items, token ids or characters,
each request one of them plus a unique tail of 20 items; 4 workers) through
`CacheAwarePolicy.select` inside a running gateway's cache-index actor, on uvloop:

- hot path: CPU-µs of `select` itself (what a request waits for), timed around each call;
- per request: process CPU over the whole run / requests, with whatever the actor does for them
  (the tree inserts, eviction wake-ups) and the loop's scheduling included;
- `--burst K`: K selects per loop iteration before yielding (K requests routed back to back, as
  under concurrent load), then one yield; 1 = a request per iteration;
- routing (a run of its own): the share of requests whose prefix the trees held when they came
  (matched share above the threshold) and a digest of the chosen workers in order, to compare
  two trees decision by decision.

Runs against the tree it is in, or any checkout with `--tree DIR` (e.g. `git archive` of an
earlier commit), so a change can be measured side by side:

    .venv/bin/python bench/select_cost.py
    .venv/bin/python bench/select_cost.py --tree /tmp/base --kind str --burst 16
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

WORKERS = ("w0", "w1", "w2", "w3")


class Cand:
    __slots__ = ("load", "url", "worker_id")

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.url = ""
        self.load = 0


def workload(kind: str, n: int, prompts: int, length: int, seed: int) -> list[Any]:
    rng = random.Random(seed)
    if kind == "tokens":
        heads: list[Any] = [[rng.randrange(150_000) for _ in range(length)] for _ in range(prompts)]
        return [rng.choice(heads) + [rng.randrange(150_000) for _ in range(20)] for _ in range(n)]
    letters = "abcdefghijklmnopqrstuvwxyz "
    heads = ["".join(rng.choices(letters, k=length)) for _ in range(prompts)]
    return [rng.choice(heads) + "".join(rng.choices(letters, k=20)) for _ in range(n)]


async def run(args: argparse.Namespace, count_hits: bool) -> dict[str, Any]:
    from smg.actors.supervisor import Supervisor
    from smg.config import RoutingConfig
    from smg.pipeline.policies.base import RouteRequest

    cfg = RoutingConfig(policy="cache_aware", eviction_interval_secs=0)
    policy, spec = build(cfg)
    keys = workload(args.kind, args.warm + args.n, args.prompts, args.length, args.seed)
    reqs = [
        RouteRequest(tokens=k, model="m") if args.kind == "tokens" else RouteRequest(text=k)
        for k in keys
    ]
    cands = [Cand(w) for w in WORKERS]
    threshold = cfg.cache_threshold
    tree_of = getattr(policy.state, "find", policy.state.tree)  # a read that creates no tree
    async with Supervisor("bench") as sup:
        await sup.start_child(spec)
        for r in reqs[: args.warm]:
            policy.select(cands, r)
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        timed = reqs[args.warm :]
        gc.collect()
        gc.freeze()
        digest = hashlib.blake2b(digest_size=8)
        hits = 0
        hot = 0.0
        clock = time.perf_counter
        cpu0 = time.process_time()
        for i, r in enumerate(timed):
            if count_hits:  # what the tree held when this request came (not timed)
                key = r.tokens if r.tokens is not None else r.text
                hits += tree_of(r.model or "").match(key).matched / len(key) > threshold
            t0 = clock()
            choice = policy.select(cands, r)
            hot += clock() - t0
            digest.update(WORKERS[choice or 0].encode())
            if (i + 1) % args.burst == 0:
                await asyncio.sleep(0)
        await asyncio.sleep(0)
        cpu = time.process_time() - cpu0
        gc.unfreeze()
    n = len(timed)
    return {
        "kind": args.kind,
        "burst": args.burst,
        "n": n,
        "hot_us": hot / n * 1e6,
        "per_request_us": cpu / n * 1e6,
        "hit_share": hits / n if count_hits else None,
        "decisions": digest.hexdigest(),
    }


def build(cfg: Any) -> tuple[Any, Any]:
    """The policy and the cache-index actor's spec, as the gateway builds them in this tree."""
    import random as _random

    from smg.actors.supervisor import ChildSpec
    from smg.pipeline.policies import make_policy

    now = time.monotonic
    try:  # the tree owns its trees in the cache-index actor (issue 11)
        from smg.actors.cache_index import CacheIndex, CacheIndexActor

        index = CacheIndex(cfg)
        policy = make_policy(
            "cache_aware", cfg, _random.Random(0), now, cache_state=index.state, recorder=index.lane
        )
        return policy, ChildSpec("cache_index", lambda: CacheIndexActor(cfg, index=index))
    except ImportError:  # before: the policy inserts itself; the actor only evicts
        from smg.actors.cache_index import CacheIndexActor as OldActor

        policy = make_policy("cache_aware", cfg, _random.Random(0), now)
        return policy, ChildSpec("cache_index", lambda: OldActor(policy, cfg))


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=fmt)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--kind", choices=("tokens", "str"), default="tokens")
    ap.add_argument("--n", type=int, default=20_000, help="timed requests")
    ap.add_argument("--warm", type=int, default=1_000, help="requests before timing")
    ap.add_argument("--prompts", type=int, default=2_000, help="shared prefixes")
    ap.add_argument("--length", type=int, default=1_000, help="items per shared prefix")
    ap.add_argument("--burst", type=int, default=1, help="selects per loop iteration")
    ap.add_argument("--reps", type=int, default=3, help="best of")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-hits", dest="hits", action="store_false", help="skip the hit run")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.tree.resolve()))
    import uvloop

    rows = [uvloop.run(run(args, count_hits=False)) for _ in range(args.reps)]
    best = min(rows, key=lambda r: r["per_request_us"])
    best["hot_us"] = min(r["hot_us"] for r in rows)
    if args.hits:  # a run of its own: counting costs a match per request
        counted = uvloop.run(run(args, count_hits=True))
        best["hit_share"] = counted["hit_share"]
        assert counted["decisions"] == best["decisions"], "counting changed the decisions"
    best["tree"] = str(args.tree)
    print(json.dumps(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
