"""Cache-aware with `hash_misses`: routers that share workers place a new prefix alike, with no
communication (rendezvous hashing of its opening), and balance still wins over it."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from support.policy_fakes import workers

from smg.config import RoutingConfig
from smg.pipeline.policies import CacheAwarePolicy, RouteRequest, make_policy
from smg.pipeline.policies.rendezvous import WINDOW_ITEMS, pick, window_digest
from smg.pipeline.prefix_hints import block_hashes


@dataclass(frozen=True, slots=True)
class Proc:
    """A worker as one process sees it: its own worker id (a uuid per process), the shared url."""

    worker_id: str
    url: str
    load: int = 0


def router(hash_misses: bool = True, threshold: float = 0.3) -> CacheAwarePolicy:
    clock = iter(range(1, 1 << 30))
    return CacheAwarePolicy(
        cache_threshold=threshold,
        balance_abs_threshold=64,
        balance_rel_threshold=1.5,
        now=lambda: float(next(clock)),
        hash_misses=hash_misses,
    )


def engines(process: str, n: int, loads: tuple[int, ...] = ()) -> list[Proc]:
    return [
        Proc(f"{process}-{i}", f"http://10.0.0.{i}:8000", loads[i] if loads else 0)
        for i in range(n)
    ]


def conversation(g: int, rng: random.Random) -> str:
    return f"conversation {g}: " + " ".join(f"w{rng.random():.6f}" for _ in range(60))


def chat(text: str) -> RouteRequest:
    return RouteRequest(text=text, model="m")


def affinity(hash_misses: bool, groups: int = 8, turns: int = 10) -> float:
    """workers_n.py's workload in process: conversations' requests alternate between two routers
    that never hear of each other (summaries not arrived yet); a hit is a request sent where its
    conversation's previous one went."""
    rng = random.Random(7)
    prefixes = [conversation(g, rng) for g in range(groups)]
    spread = random.Random(11)  # which router takes a request: the kernel's pick, in the bench
    routers = [router(hash_misses), router(hash_misses)]
    views = [engines("a", 2), engines("b", 2)]
    last: dict[int, str] = {}
    hits = tries = 0
    for i in range(groups * turns):
        g, p = i % groups, spread.randrange(2)
        cands = views[p]
        url = cands[routers[p].select(cands, chat(f"{prefixes[g]} question {i}"))].url  # type: ignore[index]
        if g in last:
            tries += 1
            hits += last[g] == url
        last[g] = url
    return hits / tries


def test_two_routers_that_never_talk_keep_conversations_on_one_engine() -> None:
    assert affinity(hash_misses=True) == 1.0
    # what the rule it replaces does (each router's own "most cache room"): the bench's misses
    assert affinity(hash_misses=False) < 0.9


def test_same_new_prefix_same_engine_whatever_each_router_holds() -> None:
    a, b = router(), router()
    rng = random.Random(1)
    for i in range(30):  # different histories: a's and b's trees and tenant sizes differ
        a.select(engines("a", 3), chat(conversation(100 + i, rng)))
    for i in range(5):
        b.select(engines("b", 3), chat(conversation(200 + i, rng)))
    for g in range(50):
        prompt = conversation(g, rng)
        ca, cb = engines("a", 3), list(reversed(engines("b", 3)))  # order does not matter
        got_a, got_b = a.select(ca, chat(prompt)), b.select(cb, chat(prompt))
        assert got_a is not None and got_b is not None
        assert ca[got_a].url == cb[got_b].url


def test_later_turns_follow_the_first_once_it_spans_the_window() -> None:
    first = "s" * WINDOW_ITEMS + " first question"
    later = first + " answer and a second question that differs after the window"
    a, b = router(), router()
    cands = engines("x", 4)
    assert window_digest(first) == window_digest(later)
    assert a.select(cands, chat(first)) == b.select(cands, chat(later))


def test_new_prefixes_spread_over_engines() -> None:
    policy, rng = router(), random.Random(3)
    cands = engines("a", 3)
    counts = Counter(policy.select(cands, chat(conversation(g, rng))) for g in range(900))
    assert set(counts) == {0, 1, 2}
    assert all(240 <= c <= 360 for c in counts.values()), counts


def test_a_leaving_engine_moves_only_its_prefixes() -> None:
    urls = [f"http://10.0.0.{i}:8000" for i in range(4)]
    digests = [d for g in range(400) if (d := window_digest(f"prompt {g} " * 30)) is not None]
    before = [urls[pick(d, urls)] for d in digests]
    rest = urls[:2] + urls[3:]
    after = [rest[pick(d, rest)] for d in digests]
    moved = [(x, y) for x, y in zip(before, after, strict=True) if x != y]
    assert moved and all(x == urls[2] for x, _ in moved)
    assert len(moved) == before.count(urls[2])


def test_balance_still_wins_over_the_hash_when_loads_diverge() -> None:
    policy = router()
    prompt = "a new conversation " * 20
    hashed = policy.select(engines("a", 2), chat(prompt))
    assert hashed is not None
    loads = (100, 0) if hashed == 0 else (0, 100)  # the hashed engine is far busier
    policy2 = router()
    assert policy2.select(engines("a", 2, loads), chat(prompt)) == 1 - hashed
    # within the thresholds the hash holds: gap 50 <= 64
    loads = (50, 0) if hashed == 0 else (0, 50)
    assert router().select(engines("a", 2, loads), chat(prompt)) == hashed


def test_a_held_prefix_still_goes_to_its_holder() -> None:
    policy = router()
    cands = engines("a", 2)
    prompt = "held " * 60
    hashed = policy.select(cands, chat(prompt))
    other = 1 - (hashed or 0)
    held = router()
    held.state.tree("m").insert(prompt, cands[other].worker_id, 0.0)
    assert held.select(cands, chat(prompt + " more")) == other


def test_token_keys_hash_alike_and_unhashable_ids_have_no_digest() -> None:
    a, b = router(), router()
    tokens = list(range(1000, 1300))
    cands = engines("a", 3)
    assert a.select(cands, RouteRequest(tokens=tokens)) == b.select(
        list(cands), RouteRequest(tokens=[*tokens, 5, 6])
    )
    assert window_digest([1 << 64]) is None  # the policy then uses the most-room rule


def test_without_hash_misses_the_most_room_rule_stays() -> None:
    policy = router(hash_misses=False)
    cands = workers(0, 0, 0)
    picks = [policy.select(cands, chat(f"{i}:" + "p" * 300)) for i in range(3)]
    assert picks == [0, 1, 2]


def test_factory_passes_hash_misses() -> None:
    cfg = RoutingConfig(policy="cache_aware", cache_threshold=0.3)
    cands = engines("a", 5)
    prompts = [f"{g}:" + "z" * 300 for g in range(20)]
    plain = make_policy("cache_aware", cfg, random.Random(0), lambda: 0.0)
    hashed = make_policy("cache_aware", cfg, random.Random(0), lambda: 0.0, hash_misses=True)
    # most room: every new prefix to the emptiest tree, so the first five spread 0..4
    assert [plain.select(cands, chat(p)) for p in prompts[:5]] == [0, 1, 2, 3, 4]
    digests = [window_digest(p) for p in prompts]
    urls = [c.url for c in cands]
    assert [hashed.select(cands, chat(p)) for p in prompts] == [
        pick(d, urls) for d in digests if d is not None
    ]


def test_another_routers_hint_beats_the_hash() -> None:
    # the mesh's summaries, once here, name where a conversation really went (it may have been
    # placed by balance, not by the hash): they win over the hash
    cands = engines("a", 2)
    prompt = "hinted conversation " * 10  # 200 items: the hints' blocks cover most of it
    hashed = router().select(cands, chat(prompt))
    assert hashed is not None
    policy = router()
    other = cands[1 - hashed].worker_id
    policy.state.hints.learn(other, block_hashes("m", prompt, policy.state.hints.secret))
    assert policy.select(cands, chat(prompt + "?")) == 1 - hashed


def test_hints_count_for_long_prompts() -> None:
    # hints cover a prompt's first 256 items: a 3,000-character conversation another router
    # placed is followed once its summary is here (it never was: 256 / 3,000 < the threshold)
    rng = random.Random(5)
    prompt = conversation(1, rng) * 5
    assert len(prompt) > 3000
    cands = engines("a", 2)
    for hash_misses in (True, False):
        policy = router(hash_misses)
        hashed = router(hash_misses).select(cands, chat(prompt))
        assert hashed is not None
        other = cands[1 - hashed].worker_id
        policy.state.hints.learn(other, block_hashes("m", prompt, policy.state.hints.secret))
        assert policy.select(cands, chat(prompt + " next turn")) == 1 - hashed
