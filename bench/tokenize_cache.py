#!/usr/bin/env python3
"""What the tokenizer cache saves on a multi-turn chat workload (real Qwen3 template + tokenizer).

Workload: N conversations x T turns sharing one system prompt. Every request re-sends the whole
history (as chat clients do) and is rendered with the real chat template, then tokenized through
`Tokenizer.encode` (cache lookup on the loop, tokenization in the thread pool). Conversations are
interleaved round-robin, as concurrent users would be, and a fraction of requests is sent twice
(client retries / regenerate), which is what an exact-match cache can catch. Each cache mode
replays the identical request sequence on a fresh cache.

CPU is `time.process_time()` (all threads of the process), split into template rendering and
tokenization, per request. Reported: hit rates, tokens served from cache, CPU per request and
the share saved against no cache. Every mode is checked to produce the same ids as no cache.

    .venv/bin/python bench/tokenize_cache.py                     # 200 x 8, 3 reps, ~2 min
    .venv/bin/python bench/tokenize_cache.py --conversations 50 --reps 1  # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from smg.pipeline.token_cache import TokenCache, TokenCacheConfig
from smg.pipeline.tokenizer import Tokenizer
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

WORDS = (
    "the model gateway routes requests to workers and streams tokens back while caching prefixes "
    "for each conversation turn latency throughput memory budget policy retry circuit breaker "
    "health check load balancing 数据 模型 请求 café naïve résumé 🎉 🚀 quickly slowly because "
    "although however therefore python rust tokenizer template prompt completion answer question"
).split()
SYSTEM = (
    "You are a helpful assistant for an infrastructure team. Answer precisely, cite the relevant "
    "configuration flags, and prefer short code examples. " * 12
)
MODES = {
    "none": (False, False),
    "L0": (True, False),
    "L1": (False, True),
    "L0+L1": (True, True),
}


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def workload(conversations: int, turns: int, repeat: float, seed: int) -> list[list[Any]]:
    """The request sequence: each item is the message list sent (the full history so far)."""
    rng = random.Random(seed)
    histories: list[list[dict[str, str]]] = [
        [{"role": "system", "content": SYSTEM}] for _ in range(conversations)
    ]
    requests: list[list[Any]] = []
    for _ in range(turns):
        for history in histories:
            history.append({"role": "user", "content": words(rng, 20, 120)})
            requests.append(list(history))
            if rng.random() < repeat:
                requests.append(list(history))  # the same request again (a retry)
            history.append({"role": "assistant", "content": words(rng, 60, 300)})
    return requests


@dataclass
class Result:
    mode: str
    requests: int
    tokens: int
    template_cpu_s: float
    tokenize_cpu_s: float
    l0_hits: int
    l1_hits: int
    misses: int
    saved_tokens: int
    l1_mib: float
    ids_digest: int


async def replay(base: Tokenizer, requests: list[list[Any]], mode: str) -> Result:
    l0, l1 = MODES[mode]
    cfg = TokenCacheConfig(tokenizer_cache_enable_l0=l0, tokenizer_cache_enable_l1=l1)
    cache = TokenCache(cfg) if cfg.enabled else None
    tok = base.with_cache(cache)
    assert tok.chat_template is not None
    template_cpu = tokenize_cpu = 0.0
    tokens = digest = 0
    for messages in requests:
        t0 = time.process_time()
        text = tok.chat_template.render(messages)
        t1 = time.process_time()
        ids = await tok.encode(text)
        tokenize_cpu += time.process_time() - t1
        template_cpu += t1 - t0
        tokens += len(ids)
        digest = hash((digest, len(ids), ids[-1], sum(ids)))
    s = cache.stats() if cache is not None else None
    return Result(
        mode,
        len(requests),
        tokens,
        template_cpu,
        tokenize_cpu,
        s.l0_hits if s else 0,
        s.l1_hits if s else 0,
        s.misses if s else len(requests),
        s.saved_tokens if s else 0,
        (s.l1_bytes / 2**20) if s else 0.0,
        digest,
    )


def table(results: list[Result]) -> str:
    base = results[0]
    base_tok = base.tokenize_cpu_s
    base_all = base.tokenize_cpu_s + base.template_cpu_s
    lines = [
        "| cache | L0 hit % | L1 hit % | tokens from cache % | template µs/req | "
        "tokenize µs/req | tokenize CPU saved | template+tokenize saved | L1 MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        n = r.requests
        total = r.tokenize_cpu_s + r.template_cpu_s
        lines.append(
            f"| {r.mode} | {100 * r.l0_hits / n:.1f} | {100 * r.l1_hits / n:.1f} | "
            f"{100 * r.saved_tokens / r.tokens:.1f} | {1e6 * r.template_cpu_s / n:.0f} | "
            f"{1e6 * r.tokenize_cpu_s / n:.0f} | {100 * (1 - r.tokenize_cpu_s / base_tok):.1f}% | "
            f"{100 * (1 - total / base_all):.1f}% | {r.l1_mib:.1f} |"
        )
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--repeat", type=float, default=0.2, help="share of requests sent twice")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="replays per mode; the least CPU is kept")
    args = ap.parse_args()
    base = Tokenizer.load(qwen3_tokenizer_dir())
    requests = workload(args.conversations, args.turns, args.repeat, args.seed)
    await replay(base, requests[:50], "none")  # warm up the template and the tokenizer
    runs: dict[str, list[Result]] = {mode: [] for mode in MODES}
    for _ in range(args.reps):  # modes interleaved, so drifting load hits all of them alike
        for mode in MODES:
            runs[mode].append(await replay(base, requests, mode))
    results = [min(rs, key=lambda r: r.template_cpu_s + r.tokenize_cpu_s) for rs in runs.values()]
    assert len({r.ids_digest for rs in runs.values() for r in rs}) == 1, "a cache changed ids"
    r0 = results[0]
    print(
        f"{args.conversations} conversations x {args.turns} turns, {r0.requests} requests "
        f"({args.repeat:.0%} re-sent), {r0.tokens / r0.requests:.0f} prompt tokens/request "
        f"on average; ids identical across modes; least CPU of {args.reps} replays per mode\n"
    )
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main())
