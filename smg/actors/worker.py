"""WorkerActor: owns one worker's health status and circuit breaker; publishes its snapshot.

Health checks run as tasks the actor owns; their results come back as messages, so the mailbox
keeps flowing while a probe waits on the network. The request path reports outcomes with `tell`.
Every change goes to the registry as a new snapshot (`WorkerChanged`); the registry turns the
transitions it shows into events for the rest of the gateway.

Start-up and removal, as the Rust gateway: the first check waits `--worker-startup-delay`; a
worker not ready `--worker-startup-timeout-secs` after it was added asks the registry to remove
it (its registration failed), and so does one marked failed under `--remove-unhealthy-workers`
(not a worker imported from the mesh: its removal would reach every node; its owner decides).
With `--disable-health-check` a worker is checked only until its first good check.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, Protocol

import structlog

from smg.actors.messages import (
    BreakerPoll,
    Outcome,
    ProbeTick,
    RemoveWorker,
    UpdateWorker,
    WorkerChanged,
)
from smg.actors.runtime import Actor, ActorRef
from smg.clock import TimerHandle
from smg.config import CircuitBreakerConfig, HealthConfig
from smg.core.circuit_breaker import BreakerState, CircuitBreaker
from smg.core.health import HealthStatus, ProbeResult, WorkerHealth
from smg.core.snapshots import LoadCounter, WorkerSnapshot

log = structlog.get_logger("smg.worker")


class Prober(Protocol):
    def __call__(self, worker: WorkerSnapshot) -> Awaitable[ProbeResult]: ...


class WorkerActor(Actor):
    def __init__(
        self,
        initial: WorkerSnapshot,
        *,
        registry: ActorRef,
        prober: Prober,
        health_cfg: HealthConfig,
        breaker_cfg: CircuitBreakerConfig,
        may_remove_itself: bool = True,
    ) -> None:
        super().__init__()
        self.snapshot = initial
        # False for a worker imported from the mesh: its owner node removes it, for everyone
        self.may_remove_itself = may_remove_itself
        self.registry = registry
        self.prober = prober
        self.health_cfg = health_cfg
        self.breaker = CircuitBreaker(breaker_cfg)
        self.health = WorkerHealth(health_cfg)
        self._probing = False
        self._recheck: TimerHandle | None = None  # the one pending early check
        self._added_at = 0.0
        self._not_before = 0.0  # no check before this (the start-up delay)
        self._leaving = False  # asked the registry to remove it

    @property
    def worker_id(self) -> str:
        return self.snapshot.worker_id

    @property
    def counter(self) -> LoadCounter:
        return self.snapshot.counter

    async def on_start(self) -> None:
        self.snapshot = replace(self.snapshot, ref=self.ref)
        self.registry.tell(WorkerChanged(self.snapshot))
        # First check at once (or after the start-up delay), then every interval; with health
        # checks off, only until the first good one (rechecks while it is not ready).
        cfg = self.health_cfg
        self._added_at = now = self.clock.now()
        self._not_before = now + max(0.0, cfg.worker_startup_delay)
        if cfg.worker_startup_delay > 0:
            self.tell_later(cfg.worker_startup_delay, ProbeTick())
        else:
            self.ref.tell(ProbeTick())
        if not cfg.disable_health_check:
            self.every(cfg.health_check_interval_secs, ProbeTick())

    async def handle(self, message: Any) -> Any:
        match message:
            case Outcome(success=success):
                self._on_outcome(success)
            case BreakerPoll():
                now = self.clock.now()
                transition = self.breaker.poll(now)
                if transition is not None:
                    self._publish(self.snapshot)
                else:
                    self._arm_breaker_poll(now)
            case ProbeTick():
                if not self._probing and not self._leaving and self._due():
                    self._probing = True
                    self.spawn(self._probe(), name=f"probe:{self.worker_id}")
            case ProbeResult():
                self._probing = False
                self._on_probe(message)
            case UpdateWorker(changes=changes):
                self._publish(replace(self.snapshot, **dict(changes)))
                return self.snapshot
            case _:
                raise TypeError(f"WorkerActor: unexpected message {message!r}")
        return None

    def _due(self) -> bool:
        if self.clock.now() < self._not_before:
            return False  # a regular tick inside the start-up delay
        return not (self.health_cfg.disable_health_check and self.health.routable)

    async def _probe(self) -> None:
        try:
            result = await self.prober(self.snapshot)
        except Exception as exc:  # a prober bug must read as a failed check, not a crash loop
            result = ProbeResult(ok=False, detail=repr(exc))
        self.ref.tell(result)

    def _on_probe(self, result: ProbeResult) -> None:
        now = self.clock.now()
        snap = self.snapshot
        if result.model_id and snap.model_id is None:
            # a failed probe may still have learned the model (a gRPC engine whose tokenizer
            # could not be loaded): known but unhealthy, so requests get 503, not 404
            snap = replace(snap, model_id=result.model_id)
        if result.runtime and snap.runtime_type is None:
            snap = replace(snap, runtime_type=result.runtime)
        if result.dp_size is not None and result.dp_size != snap.dp_size:
            snap = replace(snap, dp_size=result.dp_size)
        if result.adapters is not None and result.adapters != snap.adapters:
            snap = replace(snap, adapters=result.adapters)  # adapters loaded or unloaded
        ok = result.ok and snap.model_id is not None
        counter = snap.counter
        # passive health: a failed check of a READY worker that answered real traffic since the
        # last check does not count (the probe was slow under load; the worker is serving)
        excused = self.health.excused_failures
        changed = self.health.observe(ok, now, answered=counter.answered)
        if self.health.excused_failures != excused:
            counter.probes_excused += 1
            log.debug("worker_probe_excused", worker=snap.url, detail=result.detail or None)
        elif ok:
            counter.probes_ok += 1
        else:
            counter.probes_failed += 1
        if changed is not None:
            log.info(
                "worker_health", worker=snap.url, status=changed.value, detail=result.detail or None
            )
            snap = replace(snap, health=changed)
        self._publish(snap)
        if self._should_leave(now, changed):
            return
        # not ready: check again soon (backoff while failing), not a whole interval later
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        delay = self.health.recheck_in(self.health_cfg.health_check_interval_secs)
        if delay is not None:
            self._recheck = self.tell_later(delay, ProbeTick())

    def _should_leave(self, now: float, changed: HealthStatus | None) -> bool:
        """Ask the registry to remove this worker: never ready within the start-up timeout, or
        failed under --remove-unhealthy-workers. Once; no more checks then."""
        cfg = self.health_cfg
        why = None
        if not self.may_remove_itself:
            pass
        elif not self.health.ever_ready and now - self._added_at >= cfg.worker_startup_timeout_secs:
            why = f"not ready {cfg.worker_startup_timeout_secs:g} s after it was added"
        elif changed is HealthStatus.FAILED and cfg.remove_unhealthy_workers:
            why = "failed (--remove-unhealthy-workers)"
        if why is None or self._leaving:
            return self._leaving
        self._leaving = True
        log.warning("worker_removing", worker=self.snapshot.url, reason=why)
        self.registry.tell(RemoveWorker(self.worker_id))
        return True

    def _on_outcome(self, success: bool) -> None:
        now = self.clock.now()
        transition = self.breaker.record(success, now)
        tally = self.snapshot.counter
        if success:
            tally.cb_successes += 1
        else:
            tally.cb_failures += 1
        tally.cb_failure_streak = self.breaker.consecutive_failures
        tally.cb_success_streak = self.breaker.consecutive_successes
        if transition is not None:
            log.info("worker_breaker", worker=self.snapshot.url, state=transition.to.label)
            self._arm_breaker_poll(now)
        self._publish(replace(self.snapshot))

    def _arm_breaker_poll(self, now: float) -> None:
        """Poll again at the open timeout. A timer may fire a little early (uvloop's timers run
        on a cached millisecond clock), so a poll that finds the breaker still open re-arms."""
        until = self.breaker.open_until
        if until is not None:
            self.tell_later(max(0.001, until - now), BreakerPoll())

    def _publish(self, snap: WorkerSnapshot) -> None:
        snap = replace(
            snap,
            breaker=self.breaker.snapshot(),
            breaker_counting=(
                self.breaker.state is not BreakerState.CLOSED
                or self.breaker.consecutive_failures > 0
            ),
        )
        if snap != self.snapshot:
            self.snapshot = snap
            self.registry.tell(WorkerChanged(snap))


def initial_snapshot(
    worker_id: str,
    url: str,
    *,
    model_id: str | None,
    worker_type: str,
    api_key: str | None,
    breaker: CircuitBreaker,
    priority: int = 50,
    cost: float = 1.0,
    labels: tuple[tuple[str, str], ...] = (),
    bootstrap_port: int | None = None,
    runtime_type: str | None = None,
    provider: str | None = None,
) -> WorkerSnapshot:
    return WorkerSnapshot(
        worker_id=worker_id,
        url=url,
        model_id=model_id,
        worker_type=worker_type,
        health=HealthStatus.PENDING,
        breaker=breaker.snapshot(),
        counter=LoadCounter(),
        api_key=api_key,
        priority=priority,
        cost=cost,
        labels=labels,
        bootstrap_port=bootstrap_port,
        runtime_type=runtime_type,
        provider=provider,
    )
