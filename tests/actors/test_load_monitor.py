"""LoadMonitorActor in simulated time with an injected fetch (no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from smg_grpc_proto.generated.common_pb2 import EngineLoad
from support.event_log import worker_snapshot

from smg.actors.load_monitor import LoadMonitorActor, monitoring_enabled
from smg.actors.messages import EngineLoadReported, WorkerRemoved
from smg.actors.runtime import ActorRef
from smg.actors.supervisor import ChildSpec, Supervisor
from smg.actors.worker import initial_snapshot
from smg.clock import FakeClock, settle
from smg.config import CircuitBreakerConfig, RoutingConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.core.snapshots import SnapshotCell, WorkerSnapshot
from smg.pipeline.loads import LoadBoard, WorkerLoad

INTERVAL = 10.0


worker = worker_snapshot


class FakeFetch:
    """Answers from `loads` (an exception value is raised); `hold` parks a worker's fetch."""

    def __init__(self) -> None:
        self.loads: dict[str, WorkerLoad | Exception] = {}
        self.calls: list[tuple[str, float]] = []
        self.hold: dict[str, asyncio.Event] = {}
        self.clock: FakeClock | None = None

    async def __call__(self, worker: WorkerSnapshot) -> WorkerLoad:
        assert self.clock is not None
        self.calls.append((worker.worker_id, self.clock.now()))
        gate = self.hold.get(worker.worker_id)
        if gate is not None:
            await gate.wait()
        answer = self.loads[worker.worker_id]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Env:
    def __init__(self) -> None:
        self.clock = FakeClock(start=0.0)
        self.cell: SnapshotCell[LoadBoard] = SnapshotCell(LoadBoard())
        self.workers = [worker("a"), worker("b")]
        self.fetch = FakeFetch()
        self.fetch.clock = self.clock
        self.fetch.loads = {"a": WorkerLoad(running=1), "b": WorkerLoad(running=2)}


@pytest.fixture
async def env() -> AsyncIterator[tuple[Env, ActorRef]]:
    e = Env()
    sup = Supervisor("loads", clock=e.clock)
    await sup.__aenter__()
    ref = await sup.start_child(
        ChildSpec(
            "load-monitor",
            lambda: LoadMonitorActor(
                cell=e.cell, workers=lambda: e.workers, fetch=e.fetch, interval_s=INTERVAL
            ),
        )
    )
    try:
        yield e, ref
    finally:
        for gate in e.fetch.hold.values():
            gate.set()
        await sup.__aexit__(None, None, None)


async def test_polls_at_start_then_every_interval_and_publishes(env: tuple[Env, ActorRef]) -> None:
    e, _ = env
    await settle()
    board = e.cell.value
    assert board.max_age_s == 3 * INTERVAL
    assert {k: v.running for k, v in board.loads.items()} == {"a": 1, "b": 2}
    assert board.loads["a"].timestamp == 0.0 and not board.loads["a"].pushed
    e.fetch.loads["a"] = WorkerLoad(running=7)
    await e.clock.advance(INTERVAL - 1)
    assert e.cell.value.loads["a"].running == 1
    await e.clock.advance(1)
    assert e.cell.value.loads["a"].running == 7 and e.cell.value.loads["a"].timestamp == 10.0
    await e.clock.advance(3 * INTERVAL)
    assert sorted(t for w, t in e.fetch.calls if w == "a") == [0.0, 10.0, 20.0, 30.0, 40.0]


async def test_a_report_resets_the_dispatch_counter(env: tuple[Env, ActorRef]) -> None:
    e, _ = env
    await settle()
    e.cell.value.dispatched("a").bump(500)
    e.cell.value.dispatched("b").bump(700)
    e.fetch.loads["b"] = RuntimeError("down")
    await e.clock.advance(INTERVAL)
    assert e.cell.value.dispatched("a").tokens == 0  # fresh report
    assert e.cell.value.dispatched("b").tokens == 700  # failed poll: still counting


async def test_failing_fetch_keeps_the_last_value_marked_stale(env: tuple[Env, ActorRef]) -> None:
    e, _ = env
    await settle()
    e.fetch.loads["a"] = ConnectionError("refused")
    await e.clock.advance(INTERVAL)
    a = e.cell.value.loads["a"]
    assert a.stale and a.running == 1 and a.timestamp == 0.0
    assert e.cell.value.usable("a", e.clock.now()) is not None
    await e.clock.advance(3 * INTERVAL)
    assert e.cell.value.usable("a", e.clock.now()) is None  # older than 3 intervals
    e.fetch.loads["a"] = WorkerLoad(running=4)
    await e.clock.advance(INTERVAL)
    a = e.cell.value.loads["a"]
    assert not a.stale and a.running == 4


async def test_pushed_reports_override_polls_while_fresh(env: tuple[Env, ActorRef]) -> None:
    e, ref = env
    await settle()
    await e.clock.advance(5.0)
    ref.tell(EngineLoadReported("a", EngineLoad(running_requests=42, token_usage=0.5)))
    await settle()
    a = e.cell.value.loads["a"]
    assert (a.running, a.pushed, a.timestamp) == (42, True, 5.0)
    await e.clock.advance(5.0)  # t=10: push is 5 s old, poll of a skipped
    assert e.cell.value.loads["a"].running == 42
    assert [t for w, t in e.fetch.calls if w == "a"] == [0.0]
    await e.clock.advance(INTERVAL)  # t=20: push is 15 s old, polls resume
    assert e.cell.value.loads["a"].running == 1 and not e.cell.value.loads["a"].pushed


async def test_a_push_during_a_poll_wins_and_polls_do_not_overlap(
    env: tuple[Env, ActorRef],
) -> None:
    e, ref = env
    await settle()
    gate = e.fetch.hold["a"] = asyncio.Event()
    await e.clock.advance(INTERVAL)  # poll of a starts at t=10 and hangs
    await e.clock.advance(INTERVAL)  # t=20: a still in flight, not polled again
    assert [t for w, t in e.fetch.calls if w == "a"] == [0.0, 10.0]
    ref.tell(EngineLoadReported("a", EngineLoad(running_requests=99)))
    await settle()
    gate.set()
    await settle()
    assert e.cell.value.loads["a"].running == 99  # the late poll answer is older


async def test_removed_workers_leave_the_board(env: tuple[Env, ActorRef]) -> None:
    e, ref = env
    await settle()
    e.cell.value.dispatched("b").bump(1)
    e.workers = [w for w in e.workers if w.worker_id != "b"]
    await e.clock.advance(INTERVAL)
    assert set(e.cell.value.loads) == {"a"} and "b" not in e.cell.value.counters
    ref.tell(WorkerRemoved(worker("a"), imported=False))
    await settle()
    assert not e.cell.value.loads


def test_monitoring_gate() -> None:
    assert monitoring_enabled(RoutingConfig())
    off = RoutingConfig(disable_load_monitoring=True)
    assert not monitoring_enabled(off)
    assert monitoring_enabled(RoutingConfig(disable_load_monitoring=True, policy="least_load"))
    assert monitoring_enabled(off, ["power_of_two"])


async def test_make_fetch_reads_get_load_then_falls_back_to_v1_loads() -> None:
    """One loopback check of the real HTTP fetch (no engine: a two-route aiohttp app). Polls
    carry the worker's credential: its own api_key, else --worker-api-key."""
    import aiohttp
    from aiohttp import web

    from smg.actors.load_monitor import make_fetch
    from smg.pipeline.backends.grpc_pool import EnginePool
    from smg.pipeline.backends.http import HttpBackend

    seen: list[str | None] = []

    async def get_load(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response([{"num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 9}])

    async def v1_loads(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"loads": [{"num_running_reqs": 5, "token_usage": 0.25}]})

    results = []
    for key, routes in (
        (None, [web.get("/get_load", get_load)]),
        ("own", [web.get("/v1/loads", v1_loads)]),
    ):
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as session:
                backend = HttpBackend(session, 5.0, worker_api_key="wk")
                fetch = make_fetch(EnginePool(), backend, timeout_s=2.0)
                w = initial_snapshot(
                    "x",
                    f"http://127.0.0.1:{port}",
                    model_id="m",
                    worker_type="regular",
                    api_key=key,
                    breaker=CircuitBreaker(CircuitBreakerConfig()),
                )
                results.append(await fetch(w))
        finally:
            await runner.cleanup()
    assert (results[0].running, results[0].waiting) == (2, 1)
    assert (results[1].running, results[1].kv_usage) == (5, 0.25)
    assert seen == ["Bearer wk", "Bearer own"]
