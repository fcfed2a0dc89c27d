"""A worker's health status as a pure state machine: probe results and `now` in, status out.

    PENDING --(success_threshold consecutive good checks)--> READY
    PENDING --(failure_threshold consecutive failed checks)--> NOT_READY
    READY --(failure_threshold consecutive failed checks)--> NOT_READY
    NOT_READY --(success_threshold consecutive good checks)--> READY
    NOT_READY --(not ready for health_failed_after_secs, seen at any check)--> FAILED
    FAILED --(success_threshold consecutive good checks)--> READY

A failed worker is still probed, so it can come back (unless --remove-unhealthy-workers: the
shell removes it). Only READY is routable. With --disable-health-check one good check makes a
worker READY (the shell then stops probing it). The shell (the
worker actor) runs the probes on its clock and hands each result here with `now`.

Besides the regular interval, a worker that is not ready is checked again sooner
(`recheck_in`): one counting good checks up to the threshold, or still registering, after
RECHECK_S; one failing, with backoff from BACKOFF_FIRST_S doubling up to BACKOFF_MAX_S (or the
interval, if shorter, and, for a worker never ready yet, --worker-startup-check-interval if
shorter). So an engine started together with the gateway, or a worker back from an
outage, serves within about two seconds of answering, not a whole interval (60 s by default)
times the success threshold later.

Passive health: a worker that answers real traffic is healthy. A failed (or timed-out) check of
a READY worker that answered a request successfully since the previous check is *excused*: it
does not count toward the failure threshold (and does not break a streak either). The shell
passes `answered`, the worker's running count of successful answers (one integer the request
path bumps; no message, no clock read per request). "Since the previous check" rather than
"within the last N seconds": it needs no per-request timestamp, it follows the check interval
whatever it is, and a worker that stops answering is judged by its next check alone. Under load
a probe is slowest exactly when traffic is flowing, so a slow /health never takes out a worker
that is serving; with no traffic, the checks alone decide, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from smg.config import HealthConfig

RECHECK_S = 0.25  # a worker on its way to ready: the next check
BACKOFF_FIRST_S = 0.5  # a worker failing its checks: the first recheck, doubling per failure
BACKOFF_MAX_S = 2.0  # ... up to this (one probe every 2 s of a worker that is down is cheap)


class HealthStatus(Enum):
    PENDING = "pending"
    READY = "ready"
    NOT_READY = "not_ready"
    FAILED = "failed"

    @property
    def routable(self) -> bool:
        return self is HealthStatus.READY


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One health check's answer, as a transport's prober reports it to the worker actor."""

    ok: bool
    model_id: str | None = None
    detail: str = ""
    runtime: str | None = None  # the engine the probe found ("sglang", "vllm"), when it can tell
    # the other ids the worker serves besides `model_id` (LoRA adapters in its /v1/models); None:
    # not asked this time (keep what is known)
    adapters: tuple[str, ...] | None = None
    dp_size: int | None = None  # the engine's data-parallel ranks, when the probe asked


class WorkerHealth:
    __slots__ = (
        "_answered",
        "_ever_ready",
        "_excused",
        "_failed_after_s",
        "_failure_threshold",
        "_failures",
        "_not_ready_since",
        "_startup_check_s",
        "_status",
        "_success_threshold",
        "_successes",
        "changed_at",
    )

    def __init__(self, cfg: HealthConfig, now: float | None = None) -> None:
        self._failure_threshold = max(1, cfg.health_failure_threshold)
        self._success_threshold = (
            1 if cfg.disable_health_check else max(1, cfg.health_success_threshold)
        )
        self._startup_check_s = max(0.001, cfg.worker_startup_check_interval)
        self._ever_ready = False
        self._failed_after_s = cfg.health_failed_after_secs
        self._status = HealthStatus.PENDING
        self._successes = 0
        self._failures = 0
        self._not_ready_since: float | None = None
        self._answered = 0  # the worker's successful answers as of the previous check
        self._excused = 0  # failed checks not counted: the worker was answering traffic
        self.changed_at = now  # when the status last changed (None: never observed)

    @property
    def status(self) -> HealthStatus:
        return self._status

    @property
    def routable(self) -> bool:
        return self._status.routable

    @property
    def ever_ready(self) -> bool:
        """Whether the worker was ever READY (before that it is starting up)."""
        return self._ever_ready

    @property
    def consecutive_successes(self) -> int:
        return self._successes

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    @property
    def not_ready_since(self) -> float | None:
        """When the worker last stopped being ready (set in NOT_READY and FAILED)."""
        return self._not_ready_since

    @property
    def excused_failures(self) -> int:
        """Failed checks not counted because the worker answered real traffic since the last."""
        return self._excused

    def _excuses(self, ok: bool, answered: int | None) -> bool:
        """Whether a check result is excused by passive health (see the module doc); updates the
        answered count seen. `answered` None: no passive signal (the check alone decides)."""
        if answered is None:
            return False
        served = answered > self._answered
        self._answered = answered
        return not ok and served and self._status is HealthStatus.READY

    def observe(self, ok: bool, now: float, answered: int | None = None) -> HealthStatus | None:
        """Feed one health check result; return the new status if it changed. `answered`: the
        worker's running count of successful answers to real requests (passive health)."""
        if self._excuses(ok, answered):
            self._excused += 1
            return None
        if ok:
            self._successes += 1
            self._failures = 0
            if (
                self._status is not HealthStatus.READY
                and self._successes >= self._success_threshold
            ):
                self._not_ready_since = None
                return self._move(HealthStatus.READY, now)
        else:
            self._failures += 1
            self._successes = 0
            if (
                self._status in (HealthStatus.PENDING, HealthStatus.READY)
                and self._failures >= self._failure_threshold
            ):
                self._not_ready_since = now
                return self._move(HealthStatus.NOT_READY, now)
        if (
            self._status is HealthStatus.NOT_READY
            and self._not_ready_since is not None
            and now - self._not_ready_since >= self._failed_after_s
        ):
            return self._move(HealthStatus.FAILED, now)
        return None

    def recheck_in(self, interval_s: float) -> float | None:
        """Seconds until a check besides the regular ones (None: the interval will do)."""
        if self._status is HealthStatus.READY:
            return None
        cap = interval_s if self._ever_ready else min(interval_s, self._startup_check_s)
        if self._successes or not self._failures:  # counting up, or not checked yet
            return min(RECHECK_S, cap)
        backoff = BACKOFF_FIRST_S * 2 ** min(self._failures - 1, 16)
        return min(backoff, BACKOFF_MAX_S, cap)

    def _move(self, to: HealthStatus, now: float) -> HealthStatus:
        self._status = to
        self._ever_ready = self._ever_ready or to is HealthStatus.READY
        self.changed_at = now
        return to
