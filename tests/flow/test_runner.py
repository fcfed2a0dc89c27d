"""The runner's retry and outcome logic against a scripted backend (no sockets)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest
from support.runner_metrics import RecordingMetrics

from smg.config import RetryConfig
from smg.core.circuit_breaker import BreakerSnapshot, BreakerState
from smg.core.health import HealthStatus
from smg.core.retry import RetryPolicy
from smg.core.snapshots import LoadCounter, RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.errors import ApiError
from smg.flow.prepare import route_text
from smg.flow.runner import Runner
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.policies import RoundRobinPolicy, RouteRequest


class FakeResponse:
    def __init__(self, status: int) -> None:
        self.status = status
        self.released = False

    def release(self) -> None:
        self.released = True


class ScriptedBackend:
    """Answers per worker url from a script: an int status or an UpstreamError kind."""

    timeout_s = 7.0

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = script
        self.calls: list[str] = []
        self.budgets: list[float | None] = []

    async def open(
        self,
        worker: WorkerSnapshot,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> Any:
        self.calls.append(worker.url)
        self.budgets.append(timeout_s)
        outcome = self.script[worker.url].pop(0)
        if isinstance(outcome, str):
            raise UpstreamError(outcome, "scripted", self.timeout_s)
        return FakeResponse(outcome)


BACKENDS: dict[Runner, ScriptedBackend] = {}


class RecordingClock:
    """Time moves only when the runner sleeps (and by `per_call` at each `now()` read after a
    sleep, to stand in for the attempts' own duration)."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.t = 100.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def call_later(self, delay: float, callback: Any) -> Any:
        raise AssertionError("not used")


class Outcomes:
    def __init__(self) -> None:
        self.told: list[tuple[str, bool]] = []


class FakeRef:
    def __init__(self, url: str, log: Outcomes) -> None:
        self.url = url
        self.log = log

    def tell(self, message: Any) -> None:
        self.log.told.append((self.url, message.success))


def worker(url: str, log: Outcomes, *, health: HealthStatus = HealthStatus.READY) -> WorkerSnapshot:
    return WorkerSnapshot(
        worker_id=url,
        url=url,
        model_id="m",
        worker_type="regular",
        health=health,
        breaker=BreakerSnapshot(BreakerState.CLOSED),
        counter=LoadCounter(),
        ref=FakeRef(url, log),
        breaker_counting=True,
    )


def make_runner(
    workers: list[WorkerSnapshot],
    script: dict[str, list[Any]],
    retries: int = 3,
    timeout_s: float = 1800.0,
    backoff_ms: int = 50,
) -> tuple[Runner, ScriptedBackend, RecordingClock, RecordingMetrics]:
    backend = ScriptedBackend(script)
    clock = RecordingClock()
    metrics = RecordingMetrics()
    runner = Runner(
        registry=SnapshotCell(RegistrySnapshot.build(tuple(workers))),
        policy=RoundRobinPolicy(),
        retry=RetryPolicy.from_config(
            RetryConfig(retry_max_retries=retries, retry_initial_backoff_ms=backoff_ms)
        ),
        clock=clock,
        rng=random.Random(1),
        metrics=metrics,
        request_timeout_s=timeout_s,
    )
    BACKENDS[runner] = backend
    return runner, backend, clock, metrics


async def open_once(runner: Runner, model: str = "m") -> Any:
    return await runner.open(
        model=model,
        route=RouteRequest(),
        send=lambda w, left: BACKENDS[runner].open(w, "/x", b"", {}, left),
    )


async def test_connect_error_retries_on_the_other_worker() -> None:
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    runner, backend, clock, metrics = make_runner(
        [a, b], {"http://a": ["connect"], "http://b": [200]}
    )
    attempt = await open_once(runner)
    assert attempt.worker.url == "http://b" and attempt.attempts == 2
    assert backend.calls == ["http://a", "http://b"]
    assert log.told == [("http://a", False)]
    assert len(clock.slept) == 1 and 0.04 <= clock.slept[0] <= 0.06  # 50 ms +/- 20 %
    assert metrics.retries == 1
    assert b.counter.active == 1 and a.counter.active == 0
    runner.finish(attempt, True)
    runner.finish(attempt, True)  # idempotent
    assert b.counter.active == 0 and b.counter.processed == 1
    assert log.told[-1] == ("http://b", True)


async def test_retryable_status_is_released_and_retried() -> None:
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    runner, _backend, _, _ = make_runner([a, b], {"http://a": [503], "http://b": [200]})
    attempt = await open_once(runner)
    assert attempt.response.status == 200
    assert log.told == [("http://a", False)]


async def test_429_is_retried_but_not_counted_as_a_breaker_failure() -> None:
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    runner, _, _, _ = make_runner([a, b], {"http://a": [429], "http://b": [200]})
    attempt = await open_once(runner)
    assert attempt.worker.url == "http://b"
    assert log.told == [("http://a", True)]


async def test_a_busy_engine_is_retried_elsewhere_and_not_counted_against_it() -> None:
    """A gRPC engine's RESOURCE_EXHAUSTED (`busy`) is back-pressure: try another worker, tell
    the busy one's breaker nothing. The attempt that ends well counts as an answer (passive
    health), the one that failed does not."""
    log = Outcomes()
    a, b = worker("grpc://a", log), worker("grpc://b", log)
    runner, backend, _, _ = make_runner([a, b], {"grpc://a": ["busy"], "grpc://b": [200]})
    attempt = await open_once(runner)
    assert attempt.worker.url == "grpc://b" and backend.calls == ["grpc://a", "grpc://b"]
    assert log.told == []
    runner.finish(attempt, True)
    assert (a.counter.answered, b.counter.answered) == (0, 1)


async def test_client_error_status_is_returned_without_retry() -> None:
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    runner, backend, clock, _ = make_runner([a, b], {"http://a": [400], "http://b": [200]})
    attempt = await open_once(runner)
    assert attempt.response.status == 400 and backend.calls == ["http://a"]
    assert clock.slept == []


async def test_last_attempt_status_is_relayed_when_retries_run_out() -> None:
    log = Outcomes()
    a = worker("http://a", log)
    runner, _backend, clock, _ = make_runner([a], {"http://a": [503, 503, 500]}, retries=3)
    attempt = await open_once(runner)
    assert attempt.response.status == 500 and attempt.attempts == 3
    assert len(clock.slept) == 2 and clock.slept[1] > clock.slept[0] * 1.0


async def test_all_connect_failures_give_502_and_timeouts_504() -> None:
    log = Outcomes()
    a = worker("http://a", log)
    runner, _, _, _ = make_runner([a], {"http://a": ["connect", "connect"]}, retries=2)
    with pytest.raises(ApiError) as err:
        await open_once(runner)
    assert err.value.status == 502 and err.value.code == "upstream_connection_error"
    assert a.counter.active == 0
    runner, _, _, _ = make_runner([a], {"http://a": ["timeout"]}, retries=1)
    with pytest.raises(ApiError) as err:
        await open_once(runner)
    assert err.value.status == 504 and err.value.code == "upstream_timeout"


async def test_client_facing_errors_name_no_worker() -> None:
    # finding 8: the worker's URL (and the transport's own words) stay in the log
    log = Outcomes()
    a = worker("http://10.9.8.7:8000", log)
    for kind in ("connect", "timeout"):
        runner, _, _, _ = make_runner([a], {a.url: [kind]}, retries=1)
        with pytest.raises(ApiError) as err:
            await open_once(runner)
        text = err.value.to_json().decode()
        assert "10.9.8.7" not in text and "8000" not in text and "scripted" not in text, text


async def test_a_timeout_is_never_retried() -> None:
    # finding 14: the deadline covers the whole request; a timed-out attempt spent it
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    runner, backend, clock, _ = make_runner(
        [a, b], {"http://a": ["timeout"], "http://b": [200]}, retries=5
    )
    with pytest.raises(ApiError) as err:
        await open_once(runner)
    assert err.value.code == "upstream_timeout"
    assert backend.calls == ["http://a"] and clock.slept == []
    assert log.told == [("http://a", False)]


async def test_retries_share_one_deadline() -> None:
    # each retry gets what is left of the request's budget, after the backoffs
    log = Outcomes()
    a = worker("http://a", log)
    runner, backend, clock, _ = make_runner(
        [a], {"http://a": ["connect", 503, 200]}, retries=3, timeout_s=10.0, backoff_ms=1000
    )
    attempt = await open_once(runner)
    assert attempt.response.status == 200 and len(clock.slept) == 2
    first, second, third = backend.budgets
    assert first == 10.0
    assert second == pytest.approx(10.0 - clock.slept[0])
    assert third == pytest.approx(10.0 - sum(clock.slept))
    assert third is not None and second is not None and third < second < first


async def test_a_backoff_past_the_deadline_is_not_taken() -> None:
    log = Outcomes()
    a, b = worker("http://a", log), worker("http://b", log)
    # connect failures: the 5 s backoff would outlast the 2 s budget -> stop, 502 at once
    runner, backend, clock, _ = make_runner(
        [a, b], {"http://a": ["connect"], "http://b": [200]}, timeout_s=2.0, backoff_ms=5000
    )
    with pytest.raises(ApiError) as err:
        await open_once(runner)
    assert err.value.code == "upstream_connection_error"
    assert backend.calls == ["http://a"] and clock.slept == []
    # a retryable status with no time left to retry is relayed as the answer
    runner, backend, clock, _ = make_runner(
        [a, b], {"http://a": [503], "http://b": [200]}, timeout_s=2.0, backoff_ms=5000
    )
    attempt = await open_once(runner)
    assert attempt.response.status == 503 and backend.calls == ["http://a"]
    runner.finish(attempt, False)


async def test_unknown_model_404_and_no_routable_worker_503() -> None:
    log = Outcomes()
    down = worker("http://a", log, health=HealthStatus.NOT_READY)
    opened = WorkerSnapshot(
        worker_id="http://b",
        url="http://b",
        model_id="m",
        worker_type="regular",
        health=HealthStatus.READY,
        breaker=BreakerSnapshot(BreakerState.OPEN, open_until=200.0),
        counter=LoadCounter(),
    )
    runner, _, _, _ = make_runner([down, opened], {})
    with pytest.raises(ApiError) as err:
        await open_once(runner, model="other")
    assert err.value.status == 404 and err.value.code == "model_not_found"
    with pytest.raises(ApiError) as err:
        await open_once(runner)
    assert err.value.status == 503 and err.value.code == "no_available_workers"


def test_route_text_covers_prompt_messages_and_parts() -> None:
    assert route_text({"prompt": "abc"}) == "abc"
    assert route_text({"prompt": ["a", "b"]}) == "ab"
    body = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "T"}, {"type": "image_url"}]},
        ]
    }
    assert route_text(body) == "ST"
    assert route_text({"input": "emb"}) == "emb"
    assert route_text({}) is None
