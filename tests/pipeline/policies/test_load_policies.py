"""least_load, prefix_hash, bucket and load-aware power_of_two: table tests with fake candidates,
a hand-built load board, a seeded rng and a settable clock."""

from __future__ import annotations

import random

import pytest
from support.policy_fakes import W, workers

from smg.config import RoutingConfig
from smg.core.snapshots import SnapshotCell
from smg.pipeline.loads import LoadBoard, WaitParams, WorkerLoad
from smg.pipeline.policies import (
    BucketPolicy,
    LeastLoadPolicy,
    PowerOfTwoPolicy,
    PrefixHashPolicy,
    RouteRequest,
    make_policy,
)
from smg.pipeline.policies.bucket import even_cuts, quantile_cuts
from smg.pipeline.policies.consistent_hashing import HashRing, hash64


class Now:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def cell(**loads: WorkerLoad) -> SnapshotCell[LoadBoard]:
    return SnapshotCell(LoadBoard(dict(loads), max_age_s=30.0))


TOKENS = RouteRequest(tokens=list(range(1000)))
UNTOKENIZED = RouteRequest(text="hello")


# ---- least_load --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loads", "in_flight", "expected"),
    [
        # no reports at all: join the shortest queue on in-flight
        ({}, (3, 1, 2), 1),
        ({}, (1, 1, 2), 0),
        # queued tokens / throughput: w0 2 s, w1 0.5 s, w2 1 s
        (
            {
                "w0": WorkerLoad(queued_tokens=4000),
                "w1": WorkerLoad(queued_tokens=500, throughput=1000.0),
                "w2": WorkerLoad(queued_tokens=2000),
            },
            (0, 0, 0),
            1,
        ),
        # the KV barrier outweighs a short queue near a full cache: w0 0.15*9=1.35 s vs w1 1 s
        (
            {"w0": WorkerLoad(queued_tokens=0, kv_usage=0.9), "w1": WorkerLoad(queued_tokens=2000)},
            (0, 0),
            1,
        ),
        # equal waits: fewer in flight, then order
        ({"w0": WorkerLoad(), "w1": WorkerLoad(), "w2": WorkerLoad()}, (2, 1, 1), 1),
        # a silent worker among reporters: in-flight x mean prefill / fleet throughput
        # w0 reports 2 s; w1 silent with 3 in flight -> 3*1024/2000 = 1.536 s
        ({"w0": WorkerLoad(queued_tokens=4000)}, (0, 3), 1),
        ({"w0": WorkerLoad(queued_tokens=4000)}, (0, 4), 0),
    ],
)
def test_least_load_table(
    loads: dict[str, WorkerLoad], in_flight: tuple[int, ...], expected: int
) -> None:
    policy = LeastLoadPolicy(cell(**loads), Now())
    assert policy.select(workers(*in_flight), TOKENS) == expected


def test_least_load_credits_dispatches_so_a_stale_board_is_water_filled() -> None:
    loads = cell(w0=WorkerLoad(queued_tokens=0), w1=WorkerLoad(queued_tokens=1500))
    policy = LeastLoadPolicy(loads, Now())
    picks = [policy.select(workers(0, 0), TOKENS) for _ in range(6)]
    # w0 takes 1000-token requests until its since-report work passes w1's queue
    assert picks == [0, 0, 1, 0, 1, 0]
    assert loads.value.counters["w0"].tokens == 4000
    assert loads.value.counters["w1"].requests == 2
    # unknown length: credited with the mean prefill
    policy.select(workers(0, 0), UNTOKENIZED)
    total = sum(c.tokens for c in loads.value.counters.values())
    assert total == 6000 + 1024


def test_least_load_skips_workers_at_the_waiting_cap_unless_all_are() -> None:
    loads = cell(w0=WorkerLoad(waiting=3, queued_tokens=0), w1=WorkerLoad(queued_tokens=8000))
    policy = LeastLoadPolicy(loads, Now(), max_waiting_requests=4)
    assert policy.select(workers(0, 0), TOKENS) == 0  # 3 waiting + 0 sent < 4
    assert policy.select(workers(0, 0), TOKENS) == 1  # 3 waiting + 1 sent: at the cap
    both_full = cell(w0=WorkerLoad(waiting=9), w1=WorkerLoad(waiting=5))
    assert (
        LeastLoadPolicy(both_full, Now(), max_waiting_requests=4).select(workers(0, 0), TOKENS) == 1
    )


def test_least_load_ignores_expired_stale_reports() -> None:
    board = LoadBoard(
        {"w0": WorkerLoad(queued_tokens=0, timestamp=0.0), "w1": WorkerLoad(queued_tokens=0)},
        max_age_s=30.0,
    ).marked_stale("w0")
    now = Now(10.0)
    policy = LeastLoadPolicy(SnapshotCell(board), now)
    # still usable: equal waits, w0 first
    assert policy.select(workers(5, 0), TOKENS) == 1  # ties broken by in-flight
    board.counters.clear()
    now.t = 31.0
    # w0's report expired: its 5 in flight cost 5*1024/2000 s vs w1's 1000 sent tokens
    assert policy.select(workers(5, 0), TOKENS) == 1
    assert policy.select(workers(0, 0), TOKENS) == 0


# ---- power_of_two with a load board ------------------------------------------------------------


def test_power_of_two_breaks_in_flight_ties_on_expected_wait() -> None:
    loads = cell(w0=WorkerLoad(queued_tokens=8000), w1=WorkerLoad(queued_tokens=0))
    policy = PowerOfTwoPolicy(random.Random(0), loads=loads, now=Now())
    # equal in flight: w1's far shorter expected wait decides
    assert {policy.select(workers(3, 3), TOKENS) for _ in range(5)} == {1}
    assert loads.value.counters["w1"].requests == 5
    # fewer in flight wins whatever the (possibly stale) board says, and is credited
    assert {policy.select(workers(0, 9), TOKENS) for _ in range(5)} == {0}
    assert loads.value.counters["w0"].requests == 5
    # without reports: in-flight, and without a board: in-flight (unchanged behaviour)
    quiet = PowerOfTwoPolicy(random.Random(0), loads=cell(), now=Now())
    assert {quiet.select(workers(0, 9), TOKENS) for _ in range(5)} == {0}
    plain = PowerOfTwoPolicy(random.Random(0))
    assert {plain.select(workers(0, 9), TOKENS) for _ in range(5)} == {0}


# ---- prefix_hash -------------------------------------------------------------------------------


def ring_order(ids: list[str], key: str) -> list[str]:
    """Distinct owners clockwise from `key` (the walk the policy should take)."""
    ring = HashRing.build(ids)
    order: list[str] = []
    h = hash64(key)
    start = next((i for i, p in enumerate(ring.points) if p >= h), 0)
    for step in range(len(ring.points)):
        wid = ring.owners[(start + step) % len(ring.points)]
        if wid not in order:
            order.append(wid)
    return order


def test_prefix_hash_keys_on_the_prefix_only() -> None:
    policy = PrefixHashPolicy(prefix_token_count=4)
    ws = workers(0, 0, 0, 0)
    a = policy.select(ws, RouteRequest(tokens=[1, 2, 3, 4, 100, 200]))
    b = policy.select(ws, RouteRequest(tokens=[1, 2, 3, 4, 999]))
    assert a == b
    # untokenized: 4 x prefix_token_count characters
    c = policy.select(ws, RouteRequest(text="x" * 16 + "tail one"))
    d = policy.select(ws, RouteRequest(text="x" * 16 + "another tail"))
    assert c == d
    assert policy.key(RouteRequest(tokens=[1, 2, 3, 4, 5])) == "t:1,2,3,4"
    assert policy.key(RouteRequest(routing_key="user-1")) == "k:user-1"
    assert policy.key(RouteRequest()) is None


def test_prefix_hash_spreads_distinct_prefixes() -> None:
    policy = PrefixHashPolicy()
    ws = workers(0, 0, 0, 0)
    picks = {policy.select(ws, RouteRequest(tokens=[i, i + 1, i + 2])) for i in range(200)}
    assert picks == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("owner_load", "others", "factor", "abs_gap", "moves"),
    [
        (5, 0, 1.25, 10, False),  # over 1.25 x mean but within mean + 10: stays
        (40, 0, 1.25, 10, True),  # over both: walks
        (12, 10, 1.25, 0, False),  # within 1.25 x mean
        (30, 10, 1.25, 0, True),
    ],
)
def test_prefix_hash_walks_the_ring_past_an_overloaded_owner(
    owner_load: int, others: int, factor: float, abs_gap: int, moves: bool
) -> None:
    policy = PrefixHashPolicy(
        prefix_token_count=8, load_factor=factor, balance_abs_threshold=abs_gap
    )
    request = RouteRequest(tokens=[7, 7, 7])
    ids = ["w0", "w1", "w2", "w3"]
    order = ring_order(ids, policy.key(request) or "")
    loads = {wid: (owner_load if wid == order[0] else others) for wid in ids}
    ws = [W(wid, loads[wid]) for wid in ids]
    chosen = ws[policy.select(ws, request) or 0].worker_id
    assert chosen == (order[1] if moves else order[0])


def test_prefix_hash_walk_skips_every_overloaded_neighbour_and_no_key_goes_least_loaded() -> None:
    policy = PrefixHashPolicy(balance_abs_threshold=0)
    request = RouteRequest(tokens=[1, 2, 3])
    ids = ["w0", "w1", "w2", "w3"]
    order = ring_order(ids, policy.key(request) or "")
    loads = {order[0]: 50, order[1]: 50, order[2]: 0, order[3]: 0}
    ws = [W(wid, loads[wid]) for wid in ids]
    assert ws[policy.select(ws, request) or 0].worker_id == order[2]
    assert policy.select(workers(3, 1, 2), RouteRequest()) == 1


# ---- bucket ------------------------------------------------------------------------------------


def test_cut_helpers() -> None:
    assert even_cuts(4096, 4) == (1024, 2048, 3072)
    assert quantile_cuts([5, 1, 4, 2, 3, 6], 3) == (3, 5)
    assert quantile_cuts([], 3) == () and quantile_cuts([1, 2], 1) == ()


def test_bucket_starts_with_even_ranges_by_worker_id() -> None:
    policy = BucketPolicy(Now())
    ws = [W("w2"), W("w0"), W("w1")]  # candidate order does not matter: ranges go by id
    assert policy.select(ws, RouteRequest(tokens=[0] * 100)) == 1  # w0: [0, 1365)
    assert policy.select(ws, RouteRequest(tokens=[0] * 2000)) == 2  # w1
    assert policy.select(ws, RouteRequest(text="x" * 4 * 3000)) == 0  # w2: chars / 4
    assert policy.cuts == (1365, 2730)


def test_bucket_refits_to_quantiles_after_the_interval() -> None:
    now = Now(0.0)
    policy = BucketPolicy(now, adjust_interval_s=5.0, window_s=60.0)
    ws = workers(0, 0)
    for n in [10, 20, 30, 40, 50, 60, 70, 80]:
        policy.select(ws, RouteRequest(tokens=[0] * n))
    assert policy.cuts == (2048,)  # not yet refitted
    now.t = 5.0
    policy.select(ws, RouteRequest(tokens=[0] * 45))
    assert policy.cuts == (50,)  # median of the 8 samples
    assert policy.select(ws, RouteRequest(tokens=[0] * 49)) == 0
    assert policy.select(ws, RouteRequest(tokens=[0] * 50)) == 1
    # old samples leave the window: only the recent ones count
    now.t = 70.0
    for n in [1000, 2000, 3000]:
        policy.select(ws, RouteRequest(tokens=[0] * n))
    now.t = 75.5
    policy.select(ws, RouteRequest(tokens=[0] * 10))
    assert policy.cuts == (2000,)


def test_bucket_refits_at_once_when_the_worker_set_changes() -> None:
    now = Now(0.0)
    policy = BucketPolicy(now)
    for n in [10, 20, 30, 40]:
        policy.select(workers(0, 0), RouteRequest(tokens=[0] * n))
    policy.select(workers(0, 0, 0), RouteRequest(tokens=[0] * 50))
    assert policy.cuts == (20, 30)


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ((0, 100), 0),  # imbalanced: 100 - 0 > 64 and 100 > 1.5 x 0 -> least loaded
        ((100, 10), 1),  # imbalanced the other way
        ((100, 40), 0),  # gap 60 <= 64: the bucket owner (w0 for a short prompt)
        ((300, 210), 0),  # gap 90 but 300 <= 1.5 x 210: the bucket owner
    ],
)
def test_bucket_falls_back_to_least_loaded_on_imbalance(
    loads: tuple[int, int], expected: int
) -> None:
    policy = BucketPolicy(Now(), balance_abs_threshold=64, balance_rel_threshold=1.5)
    assert policy.select(workers(*loads), RouteRequest(tokens=[0] * 10)) == expected


# ---- factory -----------------------------------------------------------------------------------


def test_make_policy_wires_the_load_knobs() -> None:
    cfg = RoutingConfig(
        least_load_kv_pressure_weight=0.5,
        least_load_default_throughput=100.0,
        least_load_mean_prefill_tokens=64,
        least_load_max_waiting_requests=3,
        prefix_token_count=8,
        prefix_hash_load_factor=2.0,
        prefix_hash_balance_abs_threshold=1,
        bucket_adjust_interval_secs=2.0,
        balance_abs_threshold=7,
        balance_rel_threshold=1.1,
    )
    loads = cell(w0=WorkerLoad(waiting=3), w1=WorkerLoad(queued_tokens=10_000))
    rng = random.Random(0)
    least = make_policy("least_load", cfg, rng, Now(), loads=loads)
    assert isinstance(least, LeastLoadPolicy)
    assert least.params == WaitParams(0.5, 100.0, 64)
    assert least.select(workers(0, 0), UNTOKENIZED) == 1  # w0 is at the waiting cap
    assert loads.value.counters["w1"].tokens == 64
    prefix = make_policy("prefix_hash", cfg, rng, Now())
    assert isinstance(prefix, PrefixHashPolicy)
    assert (prefix.prefix_token_count, prefix.load_factor, prefix.balance_abs_threshold) == (
        8,
        2.0,
        1,
    )
    bucket = make_policy("bucket", cfg, rng, Now())
    assert isinstance(bucket, BucketPolicy)
    assert (bucket.adjust_interval_s, bucket.balance_abs_threshold) == (2.0, 7)
    p2 = make_policy("power_of_two", cfg, rng, Now(), loads=loads)
    assert p2.select(workers(0, 5), TOKENS) == 0  # w0's wait (3 x 64 / 100 s) < w1's


def test_power_of_two_spreads_evenly_under_a_stale_skewed_board() -> None:
    """The policy A/B's skew (31 of 637 requests to one engine of four): the polled board says
    w0's KV cache is at the cap (the sim counts cached prefix blocks as used), the others' at 90 %,
    and every poll (here every 50 arrivals) repeats that and resets the since-report credit. Live
    in-flight counts must still spread the arrivals evenly."""
    reports = {f"w{i}": WorkerLoad(kv_usage=0.9, throughput=100.0) for i in range(1, 4)}
    reports["w0"] = WorkerLoad(kv_usage=0.999, throughput=100.0)
    loads = cell()
    policy = PowerOfTwoPolicy(random.Random(7), loads=loads, now=Now())
    in_flight = [0, 0, 0, 0]
    running: list[int] = []
    picks = [0, 0, 0, 0]
    for i in range(400):
        if i % 50 == 0:
            loads.publish(loads.value.with_reports(reports))
        if len(running) == 8:  # each request finishes after the next 8 arrive
            in_flight[running.pop(0)] -= 1
        chosen = policy.select(workers(*in_flight), TOKENS)
        assert chosen is not None
        picks[chosen] += 1
        in_flight[chosen] += 1
        running.append(chosen)
    assert all(75 <= n <= 125 for n in picks), picks
