#!/usr/bin/env python3
"""Event-loop lag while long prompts are tokenized: `Tokenizer.encode` vs encoding on the loop.

A ticker task sleeps 1 ms at a time and records how late it wakes up (the oversleep) while
`--prompts` distinct prompts of ~`--tokens` tokens each are tokenized concurrently. Modes:

- `Tokenizer.encode`: the shell (encode_batch in the thread pool, which releases the GIL);
- `inline encode`: `tokenizers.Tokenizer.encode` called on the loop, as a naive gateway would;
- `pool + encode`: the GIL-holding `encode` moved to the same pool (shows why the shell uses
  `encode_batch`: a thread that holds the GIL stalls the loop just the same).

Reports lag p50/p99/max while the work runs, the wall time to tokenize all prompts, and the
idle baseline. Uses uvloop when installed (as the gateway does), `--no-uvloop` otherwise.

    .venv/bin/python bench/loop_lag.py
    .venv/bin/python bench/loop_lag.py --prompts 64 --tokens 4000 --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from smg.pipeline.tokenizer import Tokenizer, default_pool_size
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

WORDS = (
    "gateway worker token stream cache prefix request latency policy retry breaker health "
    "数据 模型 请求 café naïve 🎉 configuration deployment kubernetes python rust, the a of "
    "and to in is for on with as by at from 42 2025 3.14 (x) [y] {z} -> => :: ; ."
).split()


def make_prompts(tok: Tokenizer, n: int, tokens: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    probe = " ".join(rng.choice(WORDS) for _ in range(2000))
    chars_per_token = len(probe) / len(tok.encode_sync(probe))
    n_words = int(tokens * chars_per_token / (len(probe) / 2000))
    return [
        f"<|im_start|>user\n{i}: " + " ".join(rng.choice(WORDS) for _ in range(n_words))
        for i in range(n)
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def ticker(lags: list[float], done: asyncio.Event) -> None:
    """Sleep 1 ms at a time until `done`, recording how late each wake-up is (ms)."""
    while not done.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append((time.perf_counter() - t0 - 0.001) * 1e3)


async def measure(work: Callable[[], Awaitable[object]]) -> tuple[list[float], float]:
    """Lags (ms) of a 1 ms ticker while `work` runs, and the work's wall time (s)."""
    lags: list[float] = []
    done = asyncio.Event()

    async def run() -> float:
        await asyncio.sleep(0.02)  # let the ticker settle
        t0 = time.perf_counter()
        await work()
        elapsed = time.perf_counter() - t0
        done.set()
        return elapsed

    async with asyncio.TaskGroup() as tg:
        tg.create_task(ticker(lags, done))
        job = tg.create_task(run())
    return lags, job.result()


async def main(args: argparse.Namespace) -> None:
    workers = args.workers or default_pool_size()
    pool = ThreadPoolExecutor(workers, "tokenize")
    tok = Tokenizer.load(qwen3_tokenizer_dir(), executor=pool)
    inner = tok._inner  # the raw HF tokenizer, for the naive baselines
    prompts = make_prompts(tok, args.prompts, args.tokens, args.seed)
    n_tokens = [len(tok.encode_sync(p)) for p in prompts]
    loop = asyncio.get_running_loop()

    async def shell() -> None:
        await asyncio.gather(*(tok.encode(p) for p in prompts))

    async def inline() -> None:
        async def one(p: str) -> None:
            await asyncio.sleep(0)
            inner.encode(p, add_special_tokens=False)

        await asyncio.gather(*(one(p) for p in prompts))

    async def pool_encode() -> None:
        await asyncio.gather(
            *(
                loop.run_in_executor(pool, partial(inner.encode, p, add_special_tokens=False))
                for p in prompts
            )
        )

    async def idle() -> None:
        await asyncio.sleep(0.5)

    modes: dict[str, Callable[[], Awaitable[None]]] = {
        "idle (no work)": idle,
        "Tokenizer.encode (encode_batch in pool)": shell,
        "inline encode on the loop": inline,
        "pool + encode (holds the GIL)": pool_encode,
    }
    await shell()  # warm-up
    rows = []
    for name, work in modes.items():
        lags: list[float] = []
        walls: list[float] = []
        for _ in range(args.reps):
            got, wall = await measure(work)
            lags += got
            walls.append(wall)
        rows.append((name, lags, statistics.median(walls)))

    print(
        f"{args.prompts} concurrent prompts, {statistics.mean(n_tokens):.0f} tokens each, "
        f"{args.reps} reps, loop: {type(loop).__module__}, {workers} pool thread(s)\n"
    )
    pool.shutdown()
    print("| mode | ticks | lag p50 ms | lag p99 ms | lag max ms | wall s (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, lags, wall in rows:
        print(
            f"| {name} | {len(lags)} | {pct(lags, 0.5):.2f} | {pct(lags, 0.99):.2f} | "
            f"{max(lags):.2f} | {wall:.3f} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-uvloop", action="store_true")
    ap.add_argument(
        "--workers", type=int, default=0, help="pool threads (0: the shell's default, CPUs - 1)"
    )
    cli = ap.parse_args()
    if not cli.no_uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    asyncio.run(main(cli))
