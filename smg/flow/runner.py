"""The request runner: pick a plan, open the attempt, retry elsewhere, report the outcome.

Retries happen only before the client has seen a byte of the answer: a connection failure or a
retryable status re-selects a worker (excluding the ones that just failed, while others remain)
after an exponential backoff with jitter. One deadline (`request_timeout_s`) covers every attempt
and backoff of a request, and the answer that follows: each attempt gets what is left of it, a
backoff that would outlast it is not taken, and a timeout is never retried (the deadline is
spent). Every attempt holds the worker's in-flight count and reports its outcome to the worker's
actor (`tell`), which owns the circuit breaker; an outcome is reported only when it says
something about the worker (a client that left says nothing: `finish(attempt, None)`).

The plan of an attempt is one worker (`select`, for the single-worker dispatcher) or, in PD mode,
a prefill/decode pair (`Pairing.pick`); the PD dispatchers hold and `settle` each leg's worker
the same way `open` and `finish` do a single worker.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import structlog

from smg import errors, tracing
from smg.actors.messages import Outcome
from smg.clock import Clock
from smg.core.circuit_breaker import is_failure_kind, is_failure_status
from smg.core.retry import RetryPolicy, is_retryable_status
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.pipeline import pd
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.policies.base import Policy, RouteRequest
from smg.pipeline.policies.per_model import ModelPolicies


class Opened(Protocol):
    """What one attempt returns: an HTTP response, or a started engine stream."""

    @property
    def status(self) -> int: ...

    def release(self) -> None: ...


R = TypeVar("R", bound=Opened)
log = structlog.get_logger("smg.runner")


class RunnerMetrics(Protocol):
    def selected(self, worker: WorkerSnapshot, model: str, policy: str | None = None) -> None: ...
    def retried(self, worker: WorkerSnapshot, attempt: int, delay_s: float) -> None: ...
    def exhausted(self, worker: WorkerSnapshot) -> None: ...
    def upstream_failed(self, worker: WorkerSnapshot, kind: str) -> None: ...
    def upstream_answered(self, status: int) -> None: ...


@dataclass(slots=True)
class Attempt(Generic[R]):
    worker: WorkerSnapshot
    response: R
    attempts: int
    finished: bool = False


def report(worker: WorkerSnapshot, success: bool) -> None:
    """Tell the worker's actor how a request went (skipped while its breaker counts nothing)."""
    ref = worker.ref
    if ref is None or (success and not worker.breaker_counting):
        return
    try:
        ref.tell(Outcome(success))
    except Exception:  # a stopped or full worker mailbox must not fail the request path
        pass


def settle(worker: WorkerSnapshot, success: bool | None) -> None:
    """An attempt on `worker` (or a PD leg) is over: release its in-flight count and report the
    outcome, unless it is unknown (None: the client left, or the attempt was cancelled)."""
    counter = worker.counter
    counter.active -= 1
    counter.processed += 1
    if success is not None:
        if success:
            counter.answered += 1  # passive health: the worker's next failed probe is excused
        report(worker, success)


class Pairing:
    """PD mode's plan: a (prefill, decode) pair, each role picked by its own policy."""

    def __init__(
        self, prefill_policy: Policy, decode_policy: Policy, clock: Clock, metrics: RunnerMetrics
    ) -> None:
        self.prefill_policy = prefill_policy
        self.decode_policy = decode_policy
        self.clock = clock
        self.metrics = metrics

    def pick(self, candidates: tuple[WorkerSnapshot, ...], route: RouteRequest) -> pd.PdPair:
        """Raises `no_prefill_worker` / `no_decode_worker` (503)."""
        with tracing.stage("select_worker"):
            pair = pd.select_pair(
                candidates,
                route,
                prefill_policy=self.prefill_policy,
                decode_policy=self.decode_policy,
                now=self.clock.now(),
            )
        model = route.model or ""
        self.metrics.selected(pair.prefill, model)
        self.metrics.selected(pair.decode, model)
        return pair


class Runner:
    def __init__(
        self,
        *,
        registry: SnapshotCell[RegistrySnapshot],
        policy: Policy,
        retry: RetryPolicy,
        clock: Clock,
        rng: random.Random,
        metrics: RunnerMetrics,
        request_timeout_s: float = 1800.0,
        make_policy: Callable[[str], Policy] | None = None,
    ) -> None:
        """`policy` is every model's default; with `make_policy` (a policy by name), a model
        whose first worker carries a `policy` label gets its own (`ModelPolicies`)."""
        self.timeout_s = request_timeout_s
        self.registry = registry
        self.policy = policy
        self.policies = ModelPolicies(policy, make_policy)
        self._synced = -1  # the registry version the per-model policies last saw
        self.retry = retry
        self.clock = clock
        self.rng = rng
        self.metrics = metrics

    def candidates(self, model: str | None) -> tuple[WorkerSnapshot, ...]:
        """Workers serving `model` (any health). Raises model_not_found."""
        snap = self.registry.value
        if model is None:
            return snap.workers
        found = snap.by_model.get(model)
        if found is None:
            raise errors.model_not_found(model)
        return found

    def select(
        self, model: str | None, route: RouteRequest, exclude: set[str] | None = None
    ) -> tuple[WorkerSnapshot, str]:
        """A routable worker of `model` (not in `exclude` while others remain) and the name of
        the policy that chose it."""
        now = self.clock.now()
        candidates = self.candidates(model)
        policy = self.policy_of(model, candidates)
        pool = [w for w in candidates if w.routable(now)]
        if exclude:
            narrowed = [w for w in pool if w.worker_id not in exclude]
            if narrowed:
                pool = narrowed
        if not pool:
            raise errors.no_healthy_worker(model)
        index = policy.select(pool, route)
        if index is None:
            raise errors.no_healthy_worker(model)
        return pool[index], policy.name

    def policy_of(self, model: str | None, candidates: tuple[WorkerSnapshot, ...]) -> Policy:
        """The policy picking among `model`'s workers (`candidates`)."""
        cell = self.registry
        if cell.version != self._synced:
            self._synced = cell.version
            self.policies.sync(cell.value.by_model)
        return self.policies.for_model(model, candidates)

    async def open(
        self,
        *,
        model: str | None,
        route: RouteRequest,
        send: Callable[[WorkerSnapshot, float], Awaitable[R]],
        request_id: str = "",
    ) -> Attempt[R]:
        """Run `send(worker, timeout_s)` on a chosen worker, retrying on other workers before
        anything is relayed; `timeout_s` is what is left of the request's deadline.

        `send` raises `UpstreamError` when the worker cannot be reached or does not answer in
        time; a retryable `status` on its result also moves on. On return the chosen worker's
        in-flight count is held: call `finish` exactly once."""
        failed: set[str] = set()
        last_error: errors.ApiError | None = None
        worker: WorkerSnapshot | None = None
        max_attempts = self.retry.max_attempts
        clock = self.clock
        deadline = clock.now() + self.timeout_s
        for attempt in range(1, max_attempts + 1):
            left = self.timeout_s if attempt == 1 else deadline - clock.now()
            if left <= 0:
                break
            with tracing.stage("select_worker"):
                worker, policy = self.select(model, route, failed)
            self.metrics.selected(worker, model or "", policy)
            counter = worker.counter
            counter.active += 1
            try:
                # open until the worker's status line (HTTP) or the engine's first events (gRPC)
                with tracing.stage("dispatch", "server.address", worker.url):
                    resp = await send(worker, left)
            except UpstreamError as exc:
                counter.active -= 1
                if is_failure_kind(exc.kind):  # a busy engine is back-pressure, not a failure
                    report(worker, False)
                self.metrics.upstream_failed(worker, exc.kind)
                failed.add(worker.worker_id)
                log.warning(
                    "upstream_attempt_failed",
                    request_id=request_id,
                    worker_id=worker.worker_id,
                    kind=exc.kind,
                    detail=exc.detail,
                    attempt=attempt,
                )
                if exc.kind == "timeout":  # the deadline is spent: nothing left to retry with
                    raise errors.upstream_timeout(self.timeout_s) from None
                last_error = errors.upstream_unreachable()
                if attempt < max_attempts and not await self._backoff(worker, attempt, deadline):
                    break
                continue
            except BaseException:
                counter.active -= 1
                raise
            status = resp.status
            if attempt < max_attempts and is_retryable_status(status):
                delay = self.retry.delay_s(attempt, self.rng)
                if clock.now() + delay < deadline:
                    counter.active -= 1
                    report(worker, not is_failure_status(status))
                    failed.add(worker.worker_id)
                    resp.release()
                    self.metrics.retried(worker, attempt, delay)
                    await clock.sleep(delay)
                    continue
            if tracing.on:
                tracing.annotate("smg.worker.url", worker.url)
                tracing.annotate("smg.attempts", attempt)
            self.metrics.upstream_answered(status)
            if attempt > 1 and is_retryable_status(status):
                self.metrics.exhausted(worker)
            return Attempt(worker=worker, response=resp, attempts=attempt)
        if worker is not None and failed:
            self.metrics.exhausted(worker)
        raise last_error or errors.upstream_timeout(self.timeout_s)

    def finish(self, attempt: Attempt[Any], success: bool | None) -> None:
        """Release the worker's in-flight count; report the outcome unless it is unknown (None:
        the client went away first, which says nothing about the worker)."""
        if attempt.finished:
            return
        attempt.finished = True
        settle(attempt.worker, success)

    async def _backoff(self, worker: WorkerSnapshot, attempt: int, deadline: float) -> bool:
        """Wait before the next attempt; False (no wait) when the wait would outlast the
        request's deadline."""
        delay = self.retry.delay_s(attempt, self.rng)
        if self.clock.now() + delay >= deadline:
            return False
        self.metrics.retried(worker, attempt, delay)
        await self.clock.sleep(delay)
        return True


def outcome_of(status: int) -> bool:
    """Success as the circuit breaker counts it."""
    return not is_failure_status(status)
