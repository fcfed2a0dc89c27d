"""The breaker core: table tests over outcome sequences, driven by explicit `now`."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from smg.config import CircuitBreakerConfig
from smg.core.circuit_breaker import (
    BreakerSnapshot,
    BreakerState,
    CircuitBreaker,
    Transition,
    is_failure_kind,
    is_failure_status,
)

CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def cfg(**kw: Any) -> CircuitBreakerConfig:
    base: dict[str, Any] = {
        "cb_failure_threshold": 3,
        "cb_success_threshold": 2,
        "cb_timeout_duration_secs": 10.0,
        "cb_window_duration_secs": 60.0,
    }
    base.update(kw)
    return CircuitBreakerConfig(**base)


def test_gauge_values_match_the_rust_gateway() -> None:
    assert [CLOSED.value, OPEN.value, HALF.value] == [0, 1, 2]
    assert [s.label for s in BreakerState] == ["closed", "open", "half_open"]


def test_defaults_follow_the_config() -> None:
    b = CircuitBreaker(CircuitBreakerConfig())
    for i in range(9):
        assert b.record(False, float(i)) is None
    assert b.record(False, 9.0) == Transition(CLOSED, OPEN, 9.0)
    assert b.open_until == 69.0


# Each row: outcomes as (success, now), then the expected state after each one.
TABLE = [
    pytest.param(
        [(False, 0), (False, 1), (False, 2)], [CLOSED, CLOSED, OPEN], id="threshold-opens"
    ),
    pytest.param(
        [(False, 0), (False, 1), (True, 2), (False, 3), (False, 4)],
        [CLOSED] * 5,
        id="success-resets-streak",
    ),
    pytest.param(
        [(False, 0), (False, 1), (False, 70)],
        [CLOSED] * 3,
        id="failures-older-than-window-drop-out",
    ),
    pytest.param(
        [(False, 0), (False, 59), (False, 60)],
        [CLOSED, CLOSED, OPEN],
        id="failure-exactly-window-old-still-counts",
    ),
    pytest.param(
        [(False, 0), (False, 1), (False, 2), (True, 5), (False, 6)],
        [CLOSED, CLOSED, OPEN, OPEN, OPEN],
        id="outcomes-while-open-are-ignored",
    ),
    pytest.param(
        [(False, 0), (False, 1), (False, 2), (True, 12), (True, 13)],
        [CLOSED, CLOSED, OPEN, HALF, CLOSED],
        id="half-open-successes-close",
    ),
    pytest.param(
        [(False, 0), (False, 1), (False, 2), (True, 12), (False, 13)],
        [CLOSED, CLOSED, OPEN, HALF, OPEN],
        id="half-open-failure-reopens",
    ),
    pytest.param(
        [(False, 0), (False, 1), (False, 2), (False, 12)],
        [CLOSED, CLOSED, OPEN, OPEN],
        id="failed-trial-after-lapse-reopens",
    ),
]


@pytest.mark.parametrize(("outcomes", "states"), TABLE)
def test_outcome_table(outcomes: list[tuple[bool, float]], states: list[BreakerState]) -> None:
    b = CircuitBreaker(cfg())
    seen = []
    for ok, now in outcomes:
        b.record(ok, float(now))
        seen.append(b.state)
    assert seen == states


def test_transitions_are_reported_once() -> None:
    b = CircuitBreaker(cfg())
    assert b.record(False, 0.0) is None
    assert b.record(False, 1.0) is None
    assert b.record(False, 2.0) == Transition(CLOSED, OPEN, 2.0)
    assert b.snapshot() == BreakerSnapshot(OPEN, 12.0)
    assert b.record(False, 3.0) is None
    assert not b.allows(11.9)
    assert b.allows(12.0)  # the lapse moves it to half-open
    assert b.state is HALF
    assert b.record(True, 12.5) is None
    assert b.record(True, 13.0) == Transition(HALF, CLOSED, 13.0)
    assert b.snapshot() == BreakerSnapshot(CLOSED, None)
    assert b.consecutive_failures == 0


def test_poll_reports_the_lapse_edge() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=1))
    assert b.record(False, 0.0) == Transition(CLOSED, OPEN, 0.0)
    assert b.poll(9.0) is None
    assert b.poll(10.0) == Transition(OPEN, HALF, 10.0)
    assert b.poll(11.0) is None
    assert b.snapshot() == BreakerSnapshot(HALF, None)


def test_record_after_unseen_lapse_reports_net_move() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=1, cb_success_threshold=1))
    b.record(False, 0.0)
    assert b.record(True, 10.0) == Transition(OPEN, CLOSED, 10.0)
    b.record(False, 20.0)
    assert b.record(True, 25.0) is None  # still open: a straggler from before it opened
    assert b.record(False, 30.0) == Transition(OPEN, OPEN, 30.0)
    assert b.open_until == 40.0
    b2 = CircuitBreaker(cfg(cb_failure_threshold=1, cb_success_threshold=3))
    b2.record(False, 0.0)
    assert b2.record(True, 10.0) == Transition(OPEN, HALF, 10.0)
    assert b2.consecutive_successes == 1


def test_reopen_restarts_the_timeout() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=1))
    b.record(False, 0.0)
    assert b.allows(10.0)
    assert b.record(False, 15.0) == Transition(HALF, OPEN, 15.0)
    assert not b.allows(24.9)
    assert b.allows(25.0)


def test_half_open_success_count_restarts_after_reopen() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=1, cb_success_threshold=2))
    b.record(False, 0.0)
    b.poll(10.0)
    b.record(True, 10.0)
    b.record(False, 11.0)  # re-open
    b.poll(21.0)
    assert b.record(True, 21.0) is None  # one success only, not two
    assert b.state is HALF


def test_consecutive_failures_gauge() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=5, cb_window_duration_secs=10.0))
    b.record(False, 0.0)
    b.record(False, 1.0)
    assert b.consecutive_failures == 2
    b.record(False, 11.5)  # the first two are now out of the window
    assert b.consecutive_failures == 1
    b.record(True, 12.0)
    assert b.consecutive_failures == 0


def test_non_positive_window_counts_every_consecutive_failure() -> None:
    b = CircuitBreaker(cfg(cb_window_duration_secs=0.0))
    b.record(False, 0.0)
    b.record(False, 1000.0)
    assert b.record(False, 99999.0) == Transition(CLOSED, OPEN, 99999.0)


def test_disabled_never_opens() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=1, disable_circuit_breaker=True))
    for i in range(100):
        assert b.record(False, float(i)) is None
        assert b.allows(float(i))
    assert b.snapshot().allows(0.0)


def test_zero_thresholds_behave_as_one() -> None:
    b = CircuitBreaker(cfg(cb_failure_threshold=0, cb_success_threshold=0))
    assert b.record(False, 0.0) == Transition(CLOSED, OPEN, 0.0)
    b.poll(10.0)
    assert b.record(True, 10.0) == Transition(HALF, CLOSED, 10.0)


@pytest.mark.parametrize(
    ("snap", "now", "allowed"),
    [
        (BreakerSnapshot(CLOSED), 0.0, True),
        (BreakerSnapshot(HALF), 0.0, True),
        (BreakerSnapshot(OPEN, 5.0), 4.999, False),
        (BreakerSnapshot(OPEN, 5.0), 5.0, True),
        (BreakerSnapshot(OPEN, None), 1e9, False),
    ],
)
def test_snapshot_allows(snap: BreakerSnapshot, now: float, allowed: bool) -> None:
    assert snap.allows(now) is allowed


def test_snapshot_is_frozen_and_slotted() -> None:
    snap = BreakerSnapshot(OPEN, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.state = CLOSED  # type: ignore[misc]
    assert not hasattr(snap, "__dict__")


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (200, False),
        (204, False),
        (301, False),
        (400, False),
        (401, False),
        (404, False),
        (408, True),
        (413, False),
        (429, False),
        (499, False),
        (500, True),
        (501, True),
        (502, True),
        (503, True),
        (504, True),
        (599, True),
        (600, False),
    ],
)
def test_is_failure_status(status: int, failure: bool) -> None:
    assert is_failure_status(status) is failure


def test_a_busy_engine_is_no_failure_of_its_breaker() -> None:
    """RESOURCE_EXHAUSTED (busy) is back-pressure like 429; unreachable or late is a failure."""
    assert not is_failure_kind("busy")
    assert is_failure_kind("connect") and is_failure_kind("timeout")
