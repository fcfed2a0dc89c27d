"""Prefix hints: hashes of block-aligned prefixes (never text) and the bounded map that routes a
fresh node's requests where other nodes sent them."""

from __future__ import annotations

from support.policy_fakes import workers

from smg.pipeline.policies.base import RouteRequest
from smg.pipeline.policies.cache_aware import CacheAwarePolicy
from smg.pipeline.prefix_hints import (
    BLOCK_ITEMS,
    HASH_BYTES,
    MAX_BLOCKS,
    MAX_HOLDERS,
    PrefixHints,
    block_hashes,
)

SECRET = b"k" * 32
PROMPT = "You are a careful assistant. Conversation 7: " + "context " * 40


def test_hashes_cover_whole_blocks_chained_and_keyed() -> None:
    hs = block_hashes("m", PROMPT, SECRET)
    assert len(hs) == MAX_BLOCKS and all(len(h) == HASH_BYTES for h in hs)
    assert block_hashes("m", PROMPT[: 3 * BLOCK_ITEMS + 5], SECRET) == hs[:3]  # a prefix's
    assert block_hashes("m", PROMPT[: BLOCK_ITEMS - 1], SECRET) == []
    assert block_hashes("other-model", PROMPT, SECRET)[0] != hs[0]
    assert block_hashes("m", PROMPT, b"x" * 32)[0] != hs[0]  # keyed: guesses need the key
    changed = "X" + PROMPT[1:]
    assert not set(block_hashes("m", changed, SECRET)) & set(hs)  # chained from the start
    tokens = list(range(100))
    assert len(block_hashes("m", tokens, SECRET)) == 100 // BLOCK_ITEMS
    assert block_hashes("m", [2**70] * 32, SECRET) == []
    joined = b"".join(hs)
    assert b"assistant" not in joined and b"context" not in joined


def test_the_longest_hinted_prefix_among_candidates_wins() -> None:
    hints = PrefixHints(SECRET)
    short = PROMPT[: 2 * BLOCK_ITEMS]
    hints.learn("w1", block_hashes("m", short, SECRET))
    hints.learn("w2", block_hashes("m", PROMPT, SECRET))
    assert hints.match("m", PROMPT + " and more", ["w1", "w2"]) == (
        MAX_BLOCKS * BLOCK_ITEMS,
        {"w2"},
    )
    assert hints.match("m", PROMPT, ["w1"]) == (2 * BLOCK_ITEMS, {"w1"})  # w2 not a candidate
    assert hints.match("m", "unrelated " * 10, ["w1", "w2"]) == (0, set())
    hints.forget("w2")
    assert hints.match("m", PROMPT, ["w1", "w2"]) == (2 * BLOCK_ITEMS, {"w1"})


def test_the_map_is_bounded() -> None:
    hints = PrefixHints(SECRET, max_entries=100)
    for i in range(50):
        hints.learn(f"w{i % 7}", block_hashes("m", f"{i:04d}" + PROMPT, SECRET))
    assert len(hints) == 100
    for i in range(MAX_HOLDERS + 3):
        hints.learn(f"x{i}", block_hashes("m", PROMPT, SECRET)[:1])
    _, holders = hints.match("m", PROMPT, [f"x{i}" for i in range(MAX_HOLDERS + 3)])
    assert len(holders) == MAX_HOLDERS


def test_an_empty_tree_follows_the_hints_and_then_its_own_tree() -> None:
    now = [0.0]
    policy = CacheAwarePolicy(
        cache_threshold=0.3,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        now=lambda: now[0],
    )
    policy.state.hints.secret = SECRET
    cands = workers(0, 0, 0)
    ids = [c.worker_id for c in cands]
    other = RouteRequest(model="m", text="Something else entirely. " * 12)
    assert policy.select(cands, other) == 0  # no hints, no match: the emptiest tree, w0
    policy.state.hints.learn(ids[2], block_hashes("m", PROMPT, SECRET))
    assert policy.select(cands, RouteRequest(model="m", text=PROMPT + " another")) == 2
    policy.state.hints.forget(ids[2])
    # the tree remembers where the hint sent it
    assert policy.select(cands, RouteRequest(model="m", text=PROMPT + " a third")) == 2
