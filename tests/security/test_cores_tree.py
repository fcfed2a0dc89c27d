"""Finding 15: the cache-aware tree kept whole prompts without a byte bound.

`--max-tree-size` (the Rust gateway's knob) bounds characters per worker per model, and only at
the periodic eviction (every 60 s by default): between passes, and over all workers and models,
nothing bounded what a flood of unique long prompts made the gateway keep. Now all trees
together stay under `--max-tree-bytes` at all times, and crossing a bound wakes an eviction pass
at once. The unit test floods the routing policy and measures with tracemalloc; the process test
floods a real gateway and watches its metrics and RSS.
"""

from __future__ import annotations

import itertools
import os
import threading
import tracemalloc
from dataclasses import dataclass

import psutil
import pytest
from integration.conftest import Launcher, wait_until

from smg.config import RoutingConfig
from smg.pipeline.policies import make_policy
from smg.pipeline.policies.base import RouteRequest

pytestmark = pytest.mark.serial  # measures a flooded gateway's memory

MB = 1 << 20


@dataclass(frozen=True, slots=True)
class Cand:
    worker_id: str
    url: str = ""
    load: int = 0


def unique_prompt(i: int, size: int) -> str:
    """`size` characters, unique from the first one on (no shared prefix to fold)."""
    head = os.urandom(16).hex()
    return (f"{head} {i} " * (size // 40 + 1))[:size]


def test_a_flood_of_unique_prompts_keeps_the_trees_under_the_cap() -> None:
    cap = 8 * MB
    cfg = RoutingConfig(policy="cache_aware", max_tree_bytes=cap)
    ticks = itertools.count()
    policy = make_policy("cache_aware", cfg, __import__("random").Random(0), lambda: next(ticks))
    state = policy.state  # type: ignore[attr-defined]
    workers = [Cand(f"http://10.0.0.{i}:8000") for i in range(4)]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        peak_bytes = 0
        for i in range(2_500):  # 2,500 x 16 KB = 40 MB of prompts, five times the cap
            policy.select(workers, RouteRequest(text=unique_prompt(i, 16_384), model="m"))
            peak_bytes = max(peak_bytes, state.total_bytes)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert peak_bytes <= cap
    assert held < cap * 1.3, f"{held / MB:.1f} MB held for an {cap / MB:.0f} MB cap"
    assert state.skipped > 1_000  # with no eviction running, the rest went unrecorded


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def test_a_gateway_flooded_with_unique_long_prompts_stays_bounded(launch: Launcher) -> None:
    cap = 8 * MB
    sims = launch.sims("sim-model", "sim-model")
    gw = launch.gateway(sims, policy="cache_aware", max_tree_bytes=cap)
    pid = gw.proc.popen.pid
    chat = {"model": "sim-model", "max_tokens": 1}

    def send(i: int) -> None:
        body = {**chat, "messages": [{"role": "user", "content": unique_prompt(i, 32_768)}]}
        r = gw.request("POST", "/v1/chat/completions", body, timeout_s=30)
        assert r.status == 200, r.body[:200]

    send(0)
    baseline = rss(pid)
    seen: list[float] = []
    errors: list[BaseException] = []

    def flood(worker: int) -> None:
        try:
            for i in range(worker, 3_000, 4):  # 3,000 x 32 KB = 96 MB of prompts
                send(i + 1)
                if i % 100 == worker:
                    seen.append(gw.metric("smg_cache_tree_bytes") or 0.0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=flood, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:1]
    assert len(seen) >= 20 and max(seen) <= cap
    assert gw.metric("smg_cache_tree_max_bytes") == cap
    grown = rss(pid) - baseline
    assert grown < 40 * MB, f"RSS grew by {grown / MB:.0f} MB"

    # and the cache still works: a conversation sticks to one worker
    before = [s.stats()["requests"] for s in sims]
    prompt = unique_prompt(10_000, 4_096)
    for _ in range(6):
        body = {**chat, "messages": [{"role": "user", "content": prompt}]}
        assert gw.request("POST", "/v1/chat/completions", body).status == 200
    wait_until(lambda: sum(s.stats()["requests"] for s in sims) - sum(before) == 6, 5, "stats")
    gained = sorted(s.stats()["requests"] - b for s, b in zip(sims, before, strict=True))
    assert gained == [0, 6]
