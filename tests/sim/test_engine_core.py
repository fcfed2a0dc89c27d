"""The simulated engine's scheduler in simulated time: timing, batching, KV, prefix cache."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from smg.sim.engine_core import CapacityError, CoreConfig, EngineCore, Progress
from smg.sim.prefix_cache import BlocksRemoved, BlocksStored, CacheCleared, block_hashes

T0 = 100.0


def run(core: EngineCore, until: float = 1e9) -> list[tuple[float, Progress]]:
    """Drive the core deadline by deadline (what the shell's timer does); (time, progress)."""
    out: list[tuple[float, Progress]] = []
    while (deadline := core.next_deadline()) is not None and deadline <= until:
        out.extend((deadline, p) for p in core.advance(deadline))
    return out


def prompt(n: int, base: int = 1000) -> list[int]:
    return list(range(base, base + n))


def test_zero_latency_finishes_at_once() -> None:
    core = EngineCore(CoreConfig())
    core.add(T0, "a", prompt(40), prompt(30, 5000))
    assert core.advance(T0) == [Progress("a", 30, 0, True)]
    assert core.next_deadline() is None
    assert core.load(T0).running == 0


@pytest.mark.parametrize(
    ("prefill_tps", "prompt_len", "first_token_at"),
    [(1000.0, 500, 0.5), (2000.0, 100, 0.05), (0.0, 5000, 0.0)],
)
def test_prefill_time(prefill_tps: float, prompt_len: int, first_token_at: float) -> None:
    core = EngineCore(CoreConfig(prefill_tokens_per_s=prefill_tps, decode_ms_per_token=10))
    core.add(T0, "a", prompt(prompt_len), prompt(3, 5000))
    events = run(core)
    assert [p.generated for _, p in events] == [1, 2, 3]
    assert events[0][0] == pytest.approx(T0 + first_token_at)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(events)]
    assert gaps == pytest.approx([0.010, 0.010])
    assert events[-1][1].finished


@pytest.mark.parametrize(("running", "itl_ms"), [(1, 12.0), (2, 14.0), (4, 18.0), (8, 26.0)])
def test_decode_latency_grows_with_batch(running: int, itl_ms: float) -> None:
    core = EngineCore(CoreConfig(decode_ms_per_token=10, decode_ms_per_running=2))
    for i in range(running):
        core.add(T0, i, prompt(20, 1000 * (i + 1)), prompt(5, 9000))
    events = run(core)
    times = sorted({t for t, p in events if p.seq_id == 0})
    assert times[0] == pytest.approx(T0)  # instant prefill gives the first token
    assert times[2] - times[1] == pytest.approx(itl_ms / 1000)


def test_chunked_prefill_spreads_a_long_prompt_over_steps() -> None:
    cfg = CoreConfig(prefill_tokens_per_s=10_000, decode_ms_per_token=10, step_token_budget=4000)
    core = EngineCore(cfg)
    core.add(T0, "long", prompt(10_000), prompt(2, 5000))
    assert core.next_deadline() == pytest.approx(T0 + 0.4)  # first chunk: 4000 tokens
    events = run(core)
    assert events[0][0] == pytest.approx(T0 + 1.0)  # 10k tokens at 10k/s, in 3 steps


def test_decoders_keep_going_while_a_prompt_prefills() -> None:
    cfg = CoreConfig(prefill_tokens_per_s=1000, decode_ms_per_token=10, step_token_budget=101)
    core = EngineCore(cfg)
    core.add(T0, "short", prompt(10), prompt(50, 5000))
    run(core, until=T0 + 0.011)
    core.add(T0 + 0.011, "long", prompt(1000), prompt(1, 6000))
    events = run(core)
    short = [t for t, p in events if p.seq_id == "short"]
    # each mixed step: 1 decode token + 100 prompt tokens (0.1 s) + 10 ms decode
    assert short[1] - short[0] == pytest.approx(0.11)
    assert max(t for t, p in events if p.seq_id == "long") > short[1]


def test_kv_capacity_queues_requests_that_do_not_fit() -> None:
    core = EngineCore(CoreConfig(kv_capacity_tokens=100, decode_ms_per_token=10))
    core.add(T0, "a", prompt(40), prompt(20, 5000))
    core.add(T0, "b", prompt(40, 2000), prompt(20, 6000))
    core.advance(T0)
    load = core.load(T0)
    assert (load.running, load.waiting, load.waiting_uncached_tokens) == (1, 1, 40)
    assert load.used_tokens == 60
    events = run(core)
    a_done = next(t for t, p in events if p.seq_id == "a" and p.finished)
    b_first = min(t for t, p in events if p.seq_id == "b")
    assert b_first >= a_done
    assert core.load(b_first).waiting == 0


def test_max_batch_queues_requests() -> None:
    core = EngineCore(CoreConfig(max_batch=1, decode_ms_per_token=1))
    core.add(T0, "a", prompt(20), prompt(3, 5000))
    core.add(T0, "b", prompt(20, 2000), prompt(3, 6000))
    core.advance(T0)
    assert (core.load(T0).running, core.load(T0).waiting) == (1, 1)
    assert [p.seq_id for _, p in run(core) if p.finished] == ["a", "b"]


def test_request_bigger_than_the_cache_is_refused() -> None:
    core = EngineCore(CoreConfig(kv_capacity_tokens=50))
    with pytest.raises(CapacityError):
        core.add(T0, "a", prompt(40), prompt(20, 5000))


def test_cancel_frees_the_slot_and_counts() -> None:
    core = EngineCore(CoreConfig(kv_capacity_tokens=100, decode_ms_per_token=10))
    core.add(T0, "a", prompt(40), prompt(50, 5000))
    core.add(T0, "b", prompt(40, 2000), prompt(20, 6000))
    core.advance(T0)
    assert core.cancel(T0 + 0.001, "a")
    assert not core.cancel(T0 + 0.001, "a")
    events = run(core)
    assert {p.seq_id for _, p in events} == {"b"}
    assert core.load(T0 + 10).used_tokens == core.cached_block_count() * 16


def test_prefix_cache_hits_and_block_events() -> None:
    core = EngineCore(CoreConfig())
    ids = prompt(40)  # 2 full blocks + 8 tokens
    out = prompt(30, 5000)
    core.add(T0, "a", ids, out)
    assert core.advance(T0)[0].cached_tokens == 0
    stored = [e for e in core.take_events() if isinstance(e, BlocksStored)]
    hashes = block_hashes(ids + out[:-1], 16)
    # prompt blocks when prefill ends, then prompt + output blocks when the request ends
    assert stored[0] == BlocksStored(
        None, ((hashes[0], tuple(ids[:16])), (hashes[1], tuple(ids[16:32])))
    )
    assert stored[1].parent_hash == hashes[1]
    assert [h for h, _ in stored[1].blocks] == hashes[2:4]
    core.add(T0 + 1, "b", ids, out)
    assert core.advance(T0 + 1)[0].cached_tokens == 32
    assert core.take_events() == []  # nothing new to store
    assert core.load(T0 + 1).cache_hit_rate == pytest.approx(32 / 80)


@pytest.mark.parametrize(("prompt_len", "cached"), [(16, 0), (17, 16), (32, 16), (33, 32)])
def test_a_cached_prompt_still_computes_one_token(prompt_len: int, cached: int) -> None:
    core = EngineCore(CoreConfig())
    core.add(T0, "a", prompt(prompt_len), prompt(20, 5000))
    core.advance(T0)
    core.add(T0, "b", prompt(prompt_len), prompt(1, 6000))
    assert core.advance(T0)[0].cached_tokens == cached


def test_eviction_frees_lru_leaves_first() -> None:
    core = EngineCore(CoreConfig(kv_capacity_tokens=96))
    core.add(T0, "a", prompt(48), [7])  # 3 cached blocks, 48 tokens
    core.advance(T0)
    a_hashes = block_hashes(prompt(48), 16)
    core.take_events()
    core.add(T0, "b", prompt(70, 3000), [8])  # needs 71 tokens: 48 free + 2 evicted blocks
    core.advance(T0)
    removed = [e for e in core.take_events() if isinstance(e, BlocksRemoved)]
    assert removed == [BlocksRemoved((a_hashes[2], a_hashes[1]))]
    core.add(T0, "a2", prompt(48), [9])  # the surviving root block still hits
    assert core.advance(T0)[0].cached_tokens == 16


def test_running_requests_pin_their_blocks() -> None:
    core = EngineCore(CoreConfig(kv_capacity_tokens=100, decode_ms_per_token=10))
    core.add(T0, "a", prompt(48), prompt(20, 5000))  # holds 68 tokens while it runs
    core.advance(T0)
    core.add(T0, "b", prompt(40, 3000), [1])  # 41 > 32 free and nothing evictable
    core.advance(T0)
    assert core.load(T0).waiting == 1
    assert not any(isinstance(e, BlocksRemoved) for e in core.take_events())


def test_clear_cache_only_when_idle() -> None:
    core = EngineCore(CoreConfig(decode_ms_per_token=10))
    core.add(T0, "a", prompt(40), prompt(3, 5000))
    core.advance(T0)
    assert not core.clear_cache()
    run(core)
    core.take_events()
    assert core.clear_cache()
    assert core.take_events() == [CacheCleared()]
    assert core.cached_block_count() == 0


def test_block_hash_chain() -> None:
    a = block_hashes(prompt(50), 16)
    b = block_hashes(prompt(32) + [0] * 18, 16)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert block_hashes(prompt(15), 16) == []
    assert all(-(2**63) <= h < 2**63 for h in a)


def test_runs_are_deterministic() -> None:
    def trace() -> list[object]:
        core = EngineCore(CoreConfig(kv_capacity_tokens=200, decode_ms_per_token=5))
        out: list[object] = []
        for i in range(6):
            core.add(T0 + i * 0.01, i, prompt(30 + i, 1000 * (i % 2)), prompt(10 + i, 7000))
            out += run(core, until=T0 + i * 0.01)
        out += run(core)
        return [*out, *core.take_events()]

    assert trace() == trace()


@pytest.mark.parametrize("module", ["engine_core.py", "script.py"])
def test_pure_modules_import_no_io(module: str) -> None:
    path = Path(__file__).resolve().parents[2] / "smg" / "sim" / module
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & {"asyncio", "socket", "time", "grpc", "threading", "random"}
