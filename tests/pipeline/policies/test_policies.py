"""Routing policies: selection behaviour of each, with fake candidates and a fake clock."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest
from support.policy_fakes import W, workers

from smg.config import POLICIES, RoutingConfig
from smg.pipeline.policies import (
    CacheAwarePolicy,
    CacheAwareState,
    ConsistentHashingPolicy,
    ManualPolicy,
    PowerOfTwoPolicy,
    RandomPolicy,
    RoundRobinPolicy,
    RouteRequest,
    least_loaded,
    make_policy,
)
from smg.pipeline.policies.consistent_hashing import HashRing, hash64


class FakeNow:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def cache_aware(
    threshold: float = 0.5, abs_gap: int = 64, rel: float = 1.5
) -> tuple[CacheAwarePolicy, FakeNow]:
    now = FakeNow()
    policy = CacheAwarePolicy(
        cache_threshold=threshold, balance_abs_threshold=abs_gap, balance_rel_threshold=rel, now=now
    )
    return policy, now


def text(req: str, model: str | None = None) -> RouteRequest:
    return RouteRequest(text=req, model=model)


# ---- every policy ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
def test_factory_builds_each_policy_and_none_on_no_candidates(name: str) -> None:
    policy = make_policy(name, RoutingConfig(), random.Random(0), FakeNow())
    assert policy.name == name
    request = RouteRequest(text="hello", routing_key="k")
    assert policy.select([], request) is None
    index = policy.select(workers(0, 0, 0), request)
    assert index is not None and 0 <= index < 3
    policy.on_worker_removed("w0")


def test_factory_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="bogus"):
        make_policy("bogus", RoutingConfig(), random.Random(0), FakeNow())


def test_factory_wires_cache_aware_config_and_shared_state() -> None:
    state = CacheAwareState()
    cfg = RoutingConfig(cache_threshold=0.0, balance_abs_threshold=0, balance_rel_threshold=1.0)
    policy = make_policy("cache_aware", cfg, random.Random(0), FakeNow(), cache_state=state)
    assert isinstance(policy, CacheAwarePolicy) and policy.state is state
    # abs 0 / rel 1.0: any load difference counts as imbalance, so the least loaded wins.
    assert policy.select(workers(3, 1, 2), text("abc")) == 1
    assert state.tree("").tenant_size("w1") == 3


def test_policy_modules_are_pure() -> None:
    """No clock, socket or event loop in the pure modules, and no module-level randomness."""
    root = Path(__file__).resolve().parents[3] / "smg" / "pipeline"
    files = [root / "radix_tree.py", *sorted((root / "policies").glob("*.py"))]
    assert len(files) == 14  # per_model.py and rendezvous.py included
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
            ):
                assert node.attr == "Random", f"{path.name} uses random.{node.attr}"
            for name in names:
                top = name.split(".")[0]
                assert top not in {"asyncio", "socket", "time"}, f"{path.name} imports {name}"


def test_least_loaded_prefers_first_on_ties() -> None:
    assert least_loaded(workers(2, 1, 1)) == 1
    assert least_loaded(workers(2, 1, 1), [0, 2]) == 2
    with pytest.raises(ValueError):
        least_loaded(workers(1), [])


# ---- round robin, random, power of two ---------------------------------------------------------


def test_round_robin_cycles() -> None:
    policy = RoundRobinPolicy()
    picks = [policy.select(workers(0, 0, 0), RouteRequest()) for _ in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    assert policy.select(workers(0, 0), RouteRequest()) in (0, 1)


def test_random_is_uniform_and_uses_the_injected_rng() -> None:
    cands = workers(0, 0, 0, 0)
    a, b = RandomPolicy(random.Random(7)), RandomPolicy(random.Random(7))
    picks = [a.select(cands, RouteRequest()) for _ in range(4000)]
    assert picks[:50] == [b.select(cands, RouteRequest()) for _ in range(50)]
    counts = Counter(picks)
    assert set(counts) == {0, 1, 2, 3}
    assert all(850 < c < 1150 for c in counts.values())


def test_power_of_two_picks_the_lower_load() -> None:
    policy = PowerOfTwoPolicy(random.Random(1))
    assert all(policy.select(workers(5, 1), RouteRequest()) == 1 for _ in range(50))
    # The heaviest of three is never chosen: any pair containing it has a lighter member.
    picks = Counter(policy.select(workers(1, 2, 100), RouteRequest()) for _ in range(300))
    assert picks[2] == 0 and picks[0] > picks[1] > 0
    assert policy.select(workers(9), RouteRequest()) == 0


def test_power_of_two_ties_go_to_the_first_sampled() -> None:
    policy = PowerOfTwoPolicy(random.Random(3))
    mirror = random.Random(3)
    for _ in range(30):
        first, _second = mirror.sample(range(4), 2)
        assert policy.select(workers(2, 2, 2, 2), RouteRequest()) == first


# ---- cache aware -------------------------------------------------------------------------------

SYSTEM = "You are a helpful assistant. " * 4


def test_cache_aware_new_prefixes_go_to_the_smallest_tree() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0, 0)
    picks = [policy.select(cands, text(f"{i}:{SYSTEM}")) for i in range(3)]
    assert picks == [0, 1, 2]


def test_cache_aware_smallest_tree_ties_go_to_lower_load() -> None:
    policy, _ = cache_aware()
    assert policy.select(workers(3, 1, 2), text("fresh prompt")) == 1


def test_cache_aware_affinity_same_prefix_same_worker() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0, 0)
    first = [policy.select(cands, text(f"{i}:{SYSTEM}")) for i in range(3)]
    # Follow-ups that extend each conversation go back where it started, even with some load.
    busy = workers(5, 3, 4)
    for i in range(3):
        assert policy.select(busy, text(f"{i}:{SYSTEM} and a follow-up")) == first[i]


def test_cache_aware_remembers_recent_prefixes_per_worker_bounded() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0)
    for i in range(200):
        policy.select(cands, text(f"{i:03d}:" + "x" * 400))
    wid = cands[0].worker_id
    recent = policy.state.recent(wid)
    assert len(recent) == 64  # bounded per worker, newest first
    assert all(isinstance(p, str) and len(p) == 256 for p in recent)
    assert recent[0].startswith("198:") and recent[1].startswith("196:")
    policy.on_worker_removed(wid)
    assert policy.state.recent(wid) == []


def test_cache_aware_seeded_prefixes_attract_their_requests() -> None:
    # What a mesh node does with another node's summaries: B starts warm for A's traffic.
    policy, now = cache_aware()
    cands = workers(0, 0, 0)
    policy.state.seed("", cands[2].worker_id, ["conversation-one:" + SYSTEM], now())
    assert policy.select(cands, text("conversation-one:" + SYSTEM + " and more")) == 2


def test_cache_aware_threshold_decides_between_cache_and_room() -> None:
    policy, _ = cache_aware(threshold=0.5)
    cands = workers(0, 0)
    assert policy.select(cands, text("abcdefghij")) == 0
    # 4 of 10 match (0.4 is not above 0.5): the emptier tree wins.
    assert policy.select(cands, text("abcdXXXXXX")) == 1
    policy.state.tree("").insert("q" * 50, "w0", 0.0)  # w0 now has far less room than w1
    # 5 of 10 is not above 0.5 either: room wins.
    assert policy.select(cands, text("abcdeZZZZZ")) == 1
    # 6 of 10 is: the holder wins although its tree is the bigger one.
    assert policy.select(cands, text("abcdefYYYY")) == 0


def test_cache_aware_among_holders_least_loaded_wins() -> None:
    policy, _ = cache_aware()
    tree = policy.state.tree("")
    tree.insert("shared prefix", "w0", 0.0)
    tree.insert("shared prefix", "w1", 0.0)
    assert policy.select(workers(5, 2, 0), text("shared prefix!")) == 1


def test_cache_aware_ignores_holders_that_are_not_candidates() -> None:
    policy, _ = cache_aware()
    policy.state.tree("").insert("prefix held by a dead worker", "dead", 0.0)
    policy.state.tree("").insert("zzzz", "w0", 0.0)
    assert policy.select(workers(0, 0), text("prefix held by a dead worker")) == 1


def test_cache_aware_imbalance_falls_back_to_least_loaded() -> None:
    policy, _ = cache_aware(abs_gap=64, rel=1.5)
    policy.state.tree("").insert(SYSTEM, "w0", 0.0)
    # gap 100 > 64 and 100 > 0 * 1.5: imbalanced, cache ignored; the key goes to w1's tree.
    assert policy.select(workers(100, 0), text(SYSTEM)) == 1
    assert policy.state.tree("").tenant_size("w1") == len(SYSTEM)


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ((200, 150), 0),  # gap 50 <= 64: balanced, cache wins
        ((300, 200), 0),  # gap 100 but 300 is not > 200 * 1.5: balanced
        ((301, 200), 1),  # gap 101 and 301 > 300: imbalanced
        ((0, 65), 0),  # the holder is also the least loaded
    ],
)
def test_cache_aware_imbalance_needs_both_gaps(loads: tuple[int, int], expected: int) -> None:
    policy, _ = cache_aware(abs_gap=64, rel=1.5)
    policy.state.tree("").insert(SYSTEM, "w0", 0.0)
    assert policy.select(workers(*loads), text(SYSTEM)) == expected


def test_cache_aware_without_text_goes_to_least_loaded_and_leaves_tree() -> None:
    policy, _ = cache_aware()
    assert policy.select(workers(4, 2, 3), RouteRequest()) == 1
    assert policy.select(workers(4, 2, 3), RouteRequest(text="")) == 1
    assert policy.state.models == ()


def test_cache_aware_keys_on_tokens_when_given() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0)
    assert policy.select(cands, RouteRequest(tokens=[1, 2, 3, 4], text="a")) == 0
    assert policy.select(cands, RouteRequest(tokens=[9, 9, 9, 9], text="a")) == 1
    assert policy.select(cands, RouteRequest(tokens=(1, 2, 3, 4, 5), text="b")) == 0
    assert policy.state.tree("").match((1, 2, 3)).tenants == ("w0",)
    assert policy.state.tree("").match("a").matched == 0


def test_cache_aware_trees_are_per_model() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0)
    assert policy.select(cands, text(SYSTEM, model="m1")) == 0
    # Same text, other model: m2's tree is empty, so w0 has no pull there and the idler w1 wins;
    # in m1 the cached prefix keeps it on w0 despite the load.
    assert policy.select(workers(1, 0), text(SYSTEM, model="m2")) == 1
    assert policy.select(workers(1, 0), text(SYSTEM, model="m1")) == 0
    assert set(policy.state.models) == {"m1", "m2"}


def test_cache_aware_evict_bounds_every_tree_in_lru_order() -> None:
    policy, now = cache_aware()
    one = workers(0)
    for i in range(20):
        policy.select(one, text(chr(65 + i) * 50, model="m"))  # 50 chars, nothing shared
    tree = policy.state.tree("m")
    assert tree.tenant_size("w0") == 1000
    freed = policy.state.evict(200)
    assert freed == 800
    assert tree.tenant_size("w0") == 200
    # The four newest survive (LRU by the injected clock); the oldest are gone.
    assert [tree.match(chr(65 + i) * 50).matched for i in (0, 15, 16, 19)] == [0, 0, 50, 50]
    assert now.t == 20.0


def test_cache_aware_forgets_removed_workers() -> None:
    policy, _ = cache_aware()
    cands = workers(0, 0)
    for i in range(4):
        policy.select(cands, text(f"{i}:{SYSTEM}", model="m"))
    policy.on_worker_removed("w0")
    assert policy.state.tree("m").tenant_size("w0") == 0
    assert policy.state.tree("m").tenant_size("w1") > 0
    policy.on_worker_removed("w1")
    assert policy.state.models == ()


# ---- consistent hashing ------------------------------------------------------------------------


def test_hash64_is_stable_across_processes() -> None:
    # blake2b with an 8-byte digest: a fixed value, unlike Python's per-process salted hash().
    assert hash64("smg") == 0x2F51E21972FFF2FA == 3409754991827612410
    assert 0 <= hash64("") < 2**64


def keys_to_workers(policy: ConsistentHashingPolicy, cands: list[W], n: int) -> dict[str, str]:
    owners = {}
    for i in range(n):
        index = policy.select(cands, RouteRequest(routing_key=f"user-{i}"))
        assert index is not None
        owners[f"user-{i}"] = cands[index].worker_id
    return owners


def test_consistent_hashing_is_sticky_and_order_independent() -> None:
    cands = [W(f"worker-{i}") for i in range(10)]
    a = ConsistentHashingPolicy(random.Random(0))
    b = ConsistentHashingPolicy(random.Random(99))
    first = keys_to_workers(a, cands, 2000)
    assert keys_to_workers(a, cands, 2000) == first
    assert keys_to_workers(b, list(reversed(cands)), 2000) == first
    share = Counter(first.values())
    assert len(share) == 10 and all(100 < c < 300 for c in share.values())


def test_consistent_hashing_moves_about_one_nth_of_keys() -> None:
    policy = ConsistentHashingPolicy(random.Random(0))
    cands = [W(f"worker-{i}") for i in range(10)]
    before = keys_to_workers(policy, cands, 5000)
    # Remove one: only its keys move.
    fewer = [c for c in cands if c.worker_id != "worker-3"]
    after = keys_to_workers(policy, fewer, 5000)
    moved = {k for k in before if before[k] != after[k]}
    assert moved == {k for k, w in before.items() if w == "worker-3"}
    assert 0.05 < len(moved) / 5000 < 0.15
    # Add one: only keys that now land on the newcomer move.
    more = [*cands, W("worker-10")]
    grown = keys_to_workers(policy, more, 5000)
    moved = {k for k in before if before[k] != grown[k]}
    assert all(grown[k] == "worker-10" for k in moved)
    assert 0.04 < len(moved) / 5000 < 0.14


def test_consistent_hashing_rebuilds_ring_only_when_the_set_changes() -> None:
    policy = ConsistentHashingPolicy(random.Random(0))
    cands = workers(0, 0, 0)
    policy.select(cands, RouteRequest(routing_key="k"))
    ring = policy.ring
    assert isinstance(ring, HashRing) and len(ring.points) == 3 * 160
    policy.select(list(reversed(cands)), RouteRequest(routing_key="k"))
    assert policy.ring is ring
    policy.select(cands[:2], RouteRequest(routing_key="k"))
    assert policy.ring is not ring and len(policy.ring.points) == 2 * 160


def test_consistent_hashing_falls_back_to_text_then_random() -> None:
    policy = ConsistentHashingPolicy(random.Random(5))
    cands = workers(0, 0, 0, 0)
    by_text = policy.select(cands, RouteRequest(text="a prompt"))
    assert all(policy.select(cands, RouteRequest(text="a prompt")) == by_text for _ in range(20))
    assert by_text == policy.select(cands, RouteRequest(routing_key="a prompt"))
    picks = {policy.select(cands, RouteRequest()) for _ in range(100)}
    assert picks == {0, 1, 2, 3}


# ---- manual ------------------------------------------------------------------------------------


def route(policy: ManualPolicy, cands: list[W], key: str | None) -> str:
    index = policy.select(cands, RouteRequest(routing_key=key))
    assert index is not None
    return cands[index].worker_id


def test_manual_is_sticky_across_order_changes_and_new_workers() -> None:
    policy = ManualPolicy(random.Random(0))
    cands = workers(0, 0, 0)
    chosen = route(policy, cands, "session-1")
    assert all(route(policy, cands, "session-1") == chosen for _ in range(20))
    assert route(policy, list(reversed(cands)), "session-1") == chosen
    assert route(policy, [*cands, *[W(f"new{i}") for i in range(5)]], "session-1") == chosen


def test_manual_spreads_first_assignments() -> None:
    policy = ManualPolicy(random.Random(0))
    cands = workers(0, 0, 0, 0)
    counts = Counter(route(policy, cands, f"s{i}") for i in range(2000))
    assert len(counts) == 4 and all(400 < c < 600 for c in counts.values())


def test_manual_fails_over_to_backup_and_stays_there() -> None:
    policy = ManualPolicy(random.Random(0))
    cands = workers(0, 0, 0, 0)
    primary = route(policy, cands, "s")
    assignment = policy.assignment("s")
    assert assignment is not None and assignment[0] == primary and len(assignment) == 2
    backup = assignment[1]
    without = [c for c in cands if c.worker_id != primary]
    assert route(policy, without, "s") == backup
    # The old primary comes back: the key stays on its new home.
    assert route(policy, cands, "s") == backup
    # Both gone: a fresh assignment among what is left.
    left = [c for c in cands if c.worker_id not in (primary, backup)]
    fresh = route(policy, left, "s")
    assert fresh in {c.worker_id for c in left}
    assert route(policy, cands, "s") == fresh


def test_manual_without_key_is_random_and_not_remembered() -> None:
    policy = ManualPolicy(random.Random(0))
    picks = {route(policy, workers(0, 0, 0), None) for _ in range(100)}
    assert picks == {"w0", "w1", "w2"}
    assert len(policy) == 0


def test_manual_map_is_a_bounded_lru() -> None:
    policy = ManualPolicy(random.Random(0), max_entries=3)
    cands = workers(0, 0)
    for key in ("a", "b", "c"):
        route(policy, cands, key)
    route(policy, cands, "a")  # touch: "b" is now the oldest
    route(policy, cands, "d")
    assert len(policy) == 3
    assert policy.assignment("b") is None
    assert all(policy.assignment(k) is not None for k in ("a", "c", "d"))


def test_manual_on_worker_removed_promotes_backups() -> None:
    policy = ManualPolicy(random.Random(0))
    cands = workers(0, 0)
    for i in range(20):
        route(policy, cands, f"s{i}")
    policy.on_worker_removed("w0")
    for i in range(20):
        assert policy.assignment(f"s{i}") == ("w1",)
    policy.on_worker_removed("w1")
    assert len(policy) == 0
