"""The radix tree in bytes: the estimate against real memory, eviction to a byte target."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.radix_checks import check_invariants

from smg.pipeline.radix_eviction import Eviction, evict
from smg.pipeline.radix_tree import RadixTree

WORKERS = [f"http://10.0.0.{i}:8000" for i in range(8)]


def prompts(kind: str, n: int, shared: bool, seed: int = 1) -> list[str] | list[list[int]]:
    """Random prompts of 50-400 elements; with `shared`, 70% extend a cut of an earlier one."""
    rng = random.Random(seed)
    out: list = []
    for _ in range(n):
        length = rng.randint(50, 400)
        if kind == "text":
            key: str | list[int] = "".join(rng.choice("abcdefgh éz") for _ in range(length))
        else:
            key = [rng.randrange(150_000) for _ in range(length)]
        if shared and out and rng.random() < 0.7:
            earlier = out[rng.randrange(len(out))]
            key = earlier[: rng.randint(1, len(earlier))] + key
        out.append(key)
    return out


@pytest.mark.parametrize("kind", ["text", "tokens"])
@pytest.mark.parametrize("tenants", [1, 4, 8])
@pytest.mark.parametrize("shared", [False, True])
def test_the_byte_estimate_tracks_real_memory(kind: str, tenants: int, shared: bool) -> None:
    keys = prompts(kind, 2_000, shared)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tree = RadixTree()
        for i, key in enumerate(keys):
            tree.insert(key, WORKERS[i % tenants], float(i))
        real = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    check_invariants(tree)
    assert 0.75 <= tree.total_bytes / real <= 1.25, (tree.total_bytes, real)


def test_insert_bound_covers_any_insert() -> None:
    rng = random.Random(7)
    tree = RadixTree()
    for i, key in enumerate(prompts("text", 500, shared=True) + prompts("tokens", 500, True)):
        before = tree.total_bytes
        bound = tree.insert_bound(key)
        tree.insert(key, rng.choice(WORKERS), float(i))
        assert tree.total_bytes - before <= bound


def test_evicting_to_a_byte_target_drops_the_least_recent_first() -> None:
    tree = RadixTree()
    for i in range(100):  # 100 unrelated prompts, over 4 workers, in time order
        tree.insert(f"{i:03d}:" + "x" * 200, WORKERS[i % 4], float(i))
    target = tree.total_bytes // 3
    evict(tree, 10**9, max_bytes=target)  # no tenant over its element bound: bytes only
    check_invariants(tree)
    assert tree.total_bytes <= target
    kept = [i for i in range(100) if tree.match(f"{i:03d}:").matched]
    assert kept == list(range(100 - len(kept), 100)), "the newest survive, whatever the worker"
    assert len(kept) >= 30


def test_a_tree_within_its_byte_target_is_left_alone() -> None:
    tree = RadixTree()
    tree.insert("abc", "t", 1.0)
    job = Eviction(tree, 10, max_bytes=tree.total_bytes)
    assert job.done and job.step(1) and job.freed == 0


keys = st.text("abc", min_size=1, max_size=8)
tenants = st.sampled_from(["a", "b", "c"])


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(keys, tenants), max_size=30),
    st.integers(0, 12),
    st.integers(0, 6000),
    st.sampled_from([1, 2, 5]),
)
def test_both_bounds_hold_after_a_pass_in_steps_or_at_once(
    inserted: list[tuple[str, str]], bound: int, max_bytes: int, budget: int
) -> None:
    whole, sliced = RadixTree(), RadixTree()
    for i, (key, tenant) in enumerate(inserted):
        whole.insert(key, tenant, float(i))
        sliced.insert(key, tenant, float(i))
    freed = evict(whole, bound, max_bytes)
    job = Eviction(sliced, bound, max_bytes)
    while not job.step(budget):
        check_invariants(sliced)
    check_invariants(whole)
    assert job.freed == freed
    assert (sliced.total_bytes, sliced.tenant_sizes()) == (whole.total_bytes, whole.tenant_sizes())
    assert whole.total_bytes <= max_bytes
    assert all(size <= bound for size in whole.tenant_sizes().values())
