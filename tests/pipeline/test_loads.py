"""Load board maths: report parsing, the expected-wait score, since-report counters, staleness."""

from __future__ import annotations

import math

import pytest

from smg.pipeline.loads import (
    Dispatched,
    LoadBoard,
    WaitParams,
    WorkerLoad,
    expected_wait,
    expected_waits,
    kv_barrier,
)

P = WaitParams(kv_pressure_weight=0.15, default_throughput=2000.0, mean_prefill_tokens=1024)


def test_from_engine_reads_the_normalised_grpc_dict() -> None:
    d = {
        "dp_ranks": 2,
        "running": 5,
        "waiting": 3,
        "used_tokens": 100,
        "max_total_tokens": 400,
        "token_usage": 0.3,
        "gen_throughput": 1500.0,
    }
    load = WorkerLoad.from_engine(d, now=7.0)
    assert load == WorkerLoad(running=5, waiting=3, kv_usage=0.3, throughput=1500.0, timestamp=7.0)
    assert WorkerLoad.from_engine({**d, "token_usage": None}).kv_usage == 0.25
    assert WorkerLoad.from_engine({**d, "waiting_uncached_tokens": 900}).queued_tokens == 900


def test_from_engine_load_reads_the_kv_event_record() -> None:
    from types import SimpleNamespace

    rec = SimpleNamespace(
        running_requests=2,
        waiting_requests=1,
        waiting_uncached_tokens=800,
        token_usage=0.4,
        gen_throughput=900.0,
    )
    assert WorkerLoad.from_engine_load(rec, now=3.0) == WorkerLoad(
        running=2,
        waiting=1,
        queued_tokens=800,
        kv_usage=0.4,
        throughput=900.0,
        timestamp=3.0,
        pushed=True,
    )


def test_from_http_get_load_list_sums_ranks_and_splits_num_reqs() -> None:
    body = [
        {"dp_rank": 0, "num_reqs": 4, "num_waiting_reqs": 1, "num_tokens": 10},
        {"dp_rank": 1, "num_reqs": 2, "num_waiting_reqs": 2, "num_tokens": 5},
    ]
    load = WorkerLoad.from_http(body)
    assert (load.running, load.waiting, load.queued_tokens, load.kv_usage) == (3, 3, None, None)


def test_from_http_v1_loads_reads_tokens_usage_and_throughput() -> None:
    rank = {
        "dp_rank": 0,
        "num_running_reqs": 2,
        "num_waiting_reqs": 1,
        "num_waiting_uncached_tokens": 300,
        "token_usage": 0.5,
        "gen_throughput": 100.0,
    }
    load = WorkerLoad.from_http({"timestamp": "x", "dp_rank_count": 2, "loads": [rank, rank]})
    assert load == WorkerLoad(
        running=4, waiting=2, queued_tokens=600, kv_usage=0.5, throughput=200.0
    )
    with pytest.raises(ValueError):
        WorkerLoad.from_http("nope")


@pytest.mark.parametrize(
    ("usage", "barrier"),
    [(None, 0.0), (0.0, 0.0), (-1.0, 0.0), (0.5, 1.0), (0.9, 9.0), (1.0, 999.0), (2.0, 999.0)],
)
def test_kv_barrier_is_zero_when_empty_and_steep_near_full(
    usage: float | None, barrier: float
) -> None:
    assert kv_barrier(usage) == pytest.approx(barrier)


@pytest.mark.parametrize(
    ("load", "sent_tokens", "wait"),
    [
        # queued tokens over reported throughput
        (WorkerLoad(queued_tokens=2000, throughput=1000.0), 0, 2.0),
        # plus what we dispatched since the report
        (WorkerLoad(queued_tokens=2000, throughput=1000.0), 1000, 3.0),
        # no throughput reported: the default
        (WorkerLoad(queued_tokens=4000), 0, 2.0),
        # waiting count without tokens: mean prefill per waiting request
        (WorkerLoad(waiting=2), 0, 2 * 1024 / 2000),
        # KV barrier: 0.15 s x 0.5 / 0.5
        (WorkerLoad(queued_tokens=0, kv_usage=0.5), 0, 0.15),
    ],
)
def test_expected_wait_table(load: WorkerLoad, sent_tokens: int, wait: float) -> None:
    sent = Dispatched()
    if sent_tokens:
        sent.bump(sent_tokens)
    assert expected_wait(load, sent, P) == pytest.approx(wait)


def test_expected_waits_scores_silent_workers_from_in_flight_at_fleet_throughput() -> None:
    board = LoadBoard({"a": WorkerLoad(queued_tokens=1000, throughput=500.0)})
    waits = expected_waits(board, ["a", "b"], [0, 3], P, now=0.0)
    assert waits == pytest.approx([2.0, 3 * 1024 / 500.0])
    # nobody reports: None (callers fall back to in-flight counts)
    assert expected_waits(LoadBoard(), ["a", "b"], [0, 3], P, now=0.0) is None


def test_counters_carry_over_until_the_worker_reports_again() -> None:
    board = LoadBoard({"a": WorkerLoad(), "b": WorkerLoad()})
    board.dispatched("a").bump(10)
    board.dispatched("b").bump(20)
    nxt = board.with_reports({"a": WorkerLoad(waiting=1)})
    assert "a" not in nxt.counters  # fresh report: counter starts over
    assert nxt.dispatched("a").tokens == 0
    assert nxt.counters["b"] is board.counters["b"]  # shared: later bumps land in both
    board.dispatched("b").bump(5)
    assert nxt.dispatched("b").tokens == 25 and nxt.dispatched("b").requests == 2
    # marking stale keeps the counter (the worker's work since its last report still counts)
    stale = nxt.marked_stale("b")
    assert stale.loads["b"].stale and stale.counters["b"].tokens == 25
    assert stale.marked_stale("b") is stale and stale.marked_stale("zz") is stale


def test_stale_reports_expire_after_max_age_and_without_drops_workers() -> None:
    board = LoadBoard({"a": WorkerLoad(timestamp=10.0)}, max_age_s=30.0).marked_stale("a")
    assert board.usable("a", 40.0) is not None
    assert board.usable("a", 40.5) is None
    fresh = LoadBoard({"a": WorkerLoad(timestamp=10.0)}, max_age_s=30.0)
    assert fresh.usable("a", 1e9) is not None  # a fresh report never expires by itself
    assert board.usable("missing", 0.0) is None
    board.dispatched("a").bump(1)
    gone = board.without(["a"])
    assert not gone.loads and not gone.counters and gone.max_age_s == 30.0
    assert gone.without(["a"]) is gone
    assert math.isinf(LoadBoard().max_age_s)


def test_loads_module_is_pure() -> None:
    import ast
    from pathlib import Path

    import smg.pipeline.loads as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                assert (name or "").split(".")[0] not in {"asyncio", "socket", "time", "random"}


def test_from_http_a_rank_workers_load_is_its_ranks_entry() -> None:
    body = [
        {"dp_rank": 0, "num_reqs": 4, "num_waiting_reqs": 1},
        {"dp_rank": 1, "num_reqs": 2, "num_waiting_reqs": 2},
    ]
    one = WorkerLoad.from_http(body, rank=1)
    assert (one.running, one.waiting) == (0, 2)
    assert WorkerLoad.from_http(body, rank=0).running == 3
    # a report without that rank (or without ranks at all): the sum, as for the engine
    assert WorkerLoad.from_http(body, rank=5).running == 3
    assert WorkerLoad.from_http([{"num_reqs": 3}], rank=1).running == 3
