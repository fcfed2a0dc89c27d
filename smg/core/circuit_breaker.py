"""A worker's circuit breaker as a pure state machine: outcomes and `now` in, transitions out.

    CLOSED --(cb_failure_threshold consecutive failures, each within the window)--> OPEN
    OPEN --(cb_timeout_duration_secs elapsed: a trial is allowed)--> HALF_OPEN
    HALF_OPEN --(cb_success_threshold successes)--> CLOSED
    HALF_OPEN --(any failure)--> OPEN

Counting follows the Rust gateway: it opens on *consecutive* failures, and one success in CLOSED
resets the count. The Rust gateway's breaker declares its window but never reads it; smg
applies it as its help text says: a failure older than the window drops out of the streak, so ten
failures spread over a quiet day do not open a breaker. A window <= 0 means no expiry.

As in the Rust gateway, HALF_OPEN lets every request through (no trial quota) and the first
failure re-opens. The owner (an actor) publishes a `BreakerSnapshot` after each transition; the hot
path only reads snapshots, so `BreakerSnapshot.allows(now)` already admits traffic once the open
timeout has passed, before the machine itself has seen the lapse (see `record`).

The enum values match the Rust gateway's `smg_worker_cb_state` gauge: closed=0, open=1,
half_open=2.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from smg.config import CircuitBreakerConfig


class BreakerState(Enum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2

    @property
    def label(self) -> str:
        """The metric label: "closed", "open", "half_open"."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Transition:
    frm: BreakerState
    to: BreakerState
    at: float


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """What the owner publishes for the hot path. `open_until` is set only when OPEN."""

    state: BreakerState
    open_until: float | None = None

    def allows(self, now: float) -> bool:
        if self.state is not BreakerState.OPEN:
            return True
        return self.open_until is not None and now >= self.open_until


CLOSED_SNAPSHOT = BreakerSnapshot(BreakerState.CLOSED)


def is_failure_status(status: int) -> bool:
    """Whether an upstream HTTP status counts against the breaker.

    5xx (the worker is broken) and 408 (it did not answer in time) are failures. 429 and the
    other 4xx are not: a 4xx is the client's fault, and a 429 is the worker's admission control
    doing its job; opening the breaker on it would turn back-pressure into an outage. Note: recent
    Rust gateway versions count their whole retryable set (408, 429, 500, 502, 503, 504) as
    breaker failures; smg deliberately leaves 429 out and counts every 5xx. Transport errors
    (connect refused, reset, timeout) have no status: the caller records them as failures.
    """
    return status == 408 or 500 <= status <= 599


def is_failure_kind(kind: str) -> bool:
    """Whether an attempt that got no answer (an `UpstreamError` of this kind) counts against
    the breaker: "busy" (a gRPC engine's RESOURCE_EXHAUSTED, its 429) does not, for the reason
    429 does not; a connection failure or a timeout does."""
    return kind != "busy"


class CircuitBreaker:
    """One worker's breaker. Not thread-safe: one owner feeds it outcomes in order of `now`."""

    __slots__ = (
        "_cfg",
        "_failure_threshold",
        "_failures",
        "_open_until",
        "_state",
        "_success_threshold",
        "_successes",
    )

    def __init__(self, cfg: CircuitBreakerConfig) -> None:
        self._cfg = cfg
        self._failure_threshold = max(1, cfg.cb_failure_threshold)
        self._success_threshold = max(1, cfg.cb_success_threshold)
        self._state = BreakerState.CLOSED
        self._open_until: float | None = None
        self._failures: deque[float] = deque()  # times of the current streak of failures
        self._successes = 0  # successes since entering HALF_OPEN

    @property
    def state(self) -> BreakerState:
        """The state as last moved by `allows`, `poll` or `record` (a lapse is applied lazily)."""
        return self._state

    @property
    def open_until(self) -> float | None:
        return self._open_until

    @property
    def consecutive_failures(self) -> int:
        """Failures in the current streak that still count (for the consecutive-failures gauge)."""
        return len(self._failures)

    @property
    def consecutive_successes(self) -> int:
        return self._successes

    def snapshot(self) -> BreakerSnapshot:
        if self._state is BreakerState.CLOSED:
            return CLOSED_SNAPSHOT
        return BreakerSnapshot(self._state, self._open_until)

    def poll(self, now: float) -> Transition | None:
        """Apply the open timeout: OPEN becomes HALF_OPEN once `open_until` has passed. The owner
        may call this from a timer at `open_until` to publish the half-open state promptly."""
        if (
            self._state is BreakerState.OPEN
            and self._open_until is not None
            and now >= self._open_until
        ):
            return self._move(BreakerState.HALF_OPEN, now)
        return None

    def allows(self, now: float) -> bool:
        """May a request go to this worker now? Moves OPEN to HALF_OPEN when the timeout lapsed."""
        self.poll(now)
        return self._state is not BreakerState.OPEN

    def record(self, success: bool, now: float) -> Transition | None:
        """Feed one outcome; return the transition if the state changed.

        The open timeout is applied first (snapshot readers may have sent trial requests before
        the machine saw the lapse), so the returned transition is the net move from the state
        before the call: usually one edge of the diagram, but a lapsed OPEN may report
        OPEN -> CLOSED (success threshold 1) or OPEN -> OPEN (the trial failed: re-opened, with a
        new `open_until`). Outcomes that arrive while still OPEN (requests sent before it opened)
        are ignored.
        """
        if self._cfg.disable_circuit_breaker:
            return None
        before = self._state
        lapsed = self.poll(now)
        moved = self._success(now) if success else self._failure(now)
        if moved is None:
            return lapsed
        if lapsed is None:
            return moved
        return Transition(before, moved.to, now)

    def _success(self, now: float) -> Transition | None:
        if self._state is BreakerState.CLOSED:
            self._failures.clear()
        elif self._state is BreakerState.HALF_OPEN:
            self._successes += 1
            if self._successes >= self._success_threshold:
                return self._move(BreakerState.CLOSED, now)
        return None

    def _failure(self, now: float) -> Transition | None:
        if self._state is BreakerState.CLOSED:
            self._failures.append(now)
            window = self._cfg.cb_window_duration_secs
            if window > 0:
                while self._failures and now - self._failures[0] > window:
                    self._failures.popleft()
            if len(self._failures) >= self._failure_threshold:
                return self._move(BreakerState.OPEN, now)
        elif self._state is BreakerState.HALF_OPEN:
            return self._move(BreakerState.OPEN, now)
        return None

    def _move(self, to: BreakerState, now: float) -> Transition:
        frm = self._state
        self._state = to
        self._successes = 0
        if to is BreakerState.OPEN:
            self._open_until = now + self._cfg.cb_timeout_duration_secs
        else:
            self._open_until = None
            self._failures.clear()
        return Transition(frm, to, now)
