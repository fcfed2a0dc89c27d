"""Micro-benchmarks of `smg.pipeline.radix_tree.RadixTree` at `--n` cached prefixes.

Two key kinds: random strings of ~`--chars` characters (HTTP mode's routing text) and random
sequences of `--tokens` token ids (gRPC mode). Keys are built before timing; each is inserted for
one of 4 tenants (round-robin), as the cache-aware policy does once per request. Measured:

- inserts/s: `--n` inserts into an empty tree (best of `--reps`), also with the cyclic GC off
  (at 100k nodes its full collections walking the tree are a large share of an insert);
- matches/s: `match` of every stored key (a full-length hit, the longest walk), of `--n` fresh
  random keys (misses after a few elements), and of stored keys with `among=` the 4 tenants (what
  cache-aware does per request);
- memory per cached prefix and per node: tracemalloc's growth while the tree is built (the tree's
  own copies of the key text included; the caller's keys excluded), over a separate build.

Compared with the Rust gateway's published figures (216,000 inserts/s; ~1.4 KB per tree node).

    .venv/bin/python bench/radix_bench.py                 # ~1 min
    .venv/bin/python bench/radix_bench.py --n 10000 --reps 1
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import string
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from smg.pipeline.radix_tree import RadixTree  # noqa: E402

RUST_INSERTS_PER_S = 216_000
RUST_BYTES_PER_NODE = 1.4 * 1024
TENANTS = ("w0", "w1", "w2", "w3")
VOCAB = 151_643  # Qwen3's regular token ids


def str_keys(rng: random.Random, n: int, chars: int) -> list[str]:
    letters = string.ascii_letters + string.digits + " "
    return ["".join(rng.choices(letters, k=rng.randint(chars - 20, chars + 20))) for _ in range(n)]


def token_keys(rng: random.Random, n: int, tokens: int) -> list[tuple[int, ...]]:
    """Tuples, not lists: after one collection the GC stops tracking a tuple of ints, so 100k
    held keys do not inflate the GC's cost (a gateway holds one request's tokens at a time)."""
    keys = [tuple(rng.randrange(VOCAB) for _ in range(tokens)) for _ in range(n)]
    gc.collect()
    return keys


def build(keys: Sequence[str | Sequence[int]]) -> RadixTree:
    tree = RadixTree()
    for i, k in enumerate(keys):
        tree.insert(k, TENANTS[i & 3], float(i))
    return tree


def best_rate(fn: Callable[[], object], n: int, reps: int) -> float:
    """Operations per second of the fastest of `reps` runs of `fn` (which does `n` operations)."""
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def bench(kind: str, keys: list, misses: list, reps: int) -> dict:  # type: ignore[type-arg]
    n = len(keys)
    row: dict = {"kind": kind, "n": n}
    row["inserts_per_s"] = best_rate(lambda: build(keys), n, reps)
    gc.disable()  # how much of an insert is the cyclic GC walking the growing tree
    try:
        row["inserts_gc_off_per_s"] = best_rate(lambda: build(keys), n, reps)
    finally:
        gc.enable()
    tree = build(keys)
    among = frozenset(TENANTS)
    row["match_hit_per_s"] = best_rate(lambda: [tree.match(k) for k in keys], n, reps)
    row["match_miss_per_s"] = best_rate(lambda: [tree.match(k) for k in misses], len(misses), reps)
    row["match_among_per_s"] = best_rate(lambda: [tree.match(k, among) for k in keys], n, reps)
    row["nodes"] = tree.node_count
    row["stored_elements"] = tree.total_size
    del tree
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tree = build(keys)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    row["bytes_per_prefix"] = used / n
    row["bytes_per_node"] = used / tree.node_count
    row["key_elements_mean"] = sum(map(len, keys)) / n
    return row


def table(rows: list[dict]) -> str:
    out = ("| keys | n | inserts/s | (GC off) | vs Rust 216k | matches/s (hit) | matches/s (miss) "
           "| matches/s (among 4) | nodes | B per prefix | B per node | vs Rust ~1.4 KB/node |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")  # fmt: skip
    for r in rows:
        out += (f"| {r['kind']} | {r['n']:,} | {r['inserts_per_s']:,.0f} "
                f"| {r['inserts_gc_off_per_s']:,.0f} "
                f"| {r['inserts_per_s'] / RUST_INSERTS_PER_S:.2f}x "
                f"| {r['match_hit_per_s']:,.0f} | {r['match_miss_per_s']:,.0f} "
                f"| {r['match_among_per_s']:,.0f} | {r['nodes']:,} | {r['bytes_per_prefix']:,.0f} "
                f"| {r['bytes_per_node']:,.0f} "
                f"| {r['bytes_per_node'] / RUST_BYTES_PER_NODE:.2f}x |\n")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=fmt)
    ap.add_argument("--n", type=int, default=100_000, help="cached prefixes")
    ap.add_argument("--chars", type=int, default=200, help="mean length of the string keys")
    ap.add_argument("--tokens", type=int, default=200, help="length of the token keys")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="raw JSON (default: bench/results/)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    rows = [
        bench(f"str ~{args.chars} chars", str_keys(rng, args.n, args.chars),
              str_keys(rng, args.n, args.chars), args.reps),
        bench(f"{args.tokens} token ids", token_keys(rng, args.n, args.tokens),
              token_keys(rng, args.n, args.tokens), args.reps),
    ]  # fmt: skip
    text = table(rows)
    print(text)
    out = args.out or REPO / "bench" / "results" / f"radix-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                               "python": sys.version.split()[0]}, indent=1))  # fmt: skip
    out.with_suffix(".md").write_text(text)
    print(f"raw: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
