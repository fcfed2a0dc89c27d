"""The health status core: table tests over probe sequences, driven by explicit `now`."""

from __future__ import annotations

from typing import Any

import pytest

from smg.config import HealthConfig
from smg.core.health import RECHECK_S, HealthStatus, WorkerHealth

P, R, N, F = HealthStatus.PENDING, HealthStatus.READY, HealthStatus.NOT_READY, HealthStatus.FAILED


def cfg(**kw: Any) -> HealthConfig:
    base: dict[str, Any] = {
        "health_failure_threshold": 3,
        "health_success_threshold": 2,
        "health_failed_after_secs": 300.0,
    }
    base.update(kw)
    return HealthConfig(**base)


def run(checks: str, step: float = 60.0, **kw: object) -> list[HealthStatus]:
    """`checks` is a string of '+' (good) and '-' (failed), one probe every `step` seconds."""
    h = WorkerHealth(cfg(**kw), now=0.0)
    out = []
    for i, c in enumerate(checks):
        h.observe(c == "+", (i + 1) * step)
        out.append(h.status)
    return out


TABLE = [
    pytest.param("", [], id="starts-pending"),
    pytest.param("+", [P], id="one-success-not-enough"),
    pytest.param("++", [P, R], id="pending-to-ready"),
    pytest.param("+-+", [P, P, P], id="pending-success-streak-broken"),
    pytest.param("---", [P, P, N], id="pending-failures-to-not-ready"),
    pytest.param("++--", [P, R, R, R], id="ready-tolerates-short-failures"),
    pytest.param("++---", [P, R, R, R, N], id="ready-to-not-ready"),
    pytest.param("++--+--", [P, R, R, R, R, R, R], id="success-resets-failure-streak"),
    pytest.param("++---++", [P, R, R, R, N, N, R], id="not-ready-recovers"),
    pytest.param("++---+-+", [P, R, R, R, N, N, N, N], id="not-ready-needs-consecutive"),
    # not_ready at t=300; failed at t>=600 (the 10th probe)
    pytest.param("++--------", [P, R, R, R, N, N, N, N, N, F], id="not-ready-long-fails"),
    pytest.param("++--------++", [P, R, R, R, N, N, N, N, N, F, F, R], id="failed-comes-back"),
    pytest.param("++---------", [P, R, R, R, N, N, N, N, N, F, F], id="failed-stays-failed"),
    pytest.param("++-----+-+-+", [P, R, R, R, N, N, N, N, N, F, F, F], id="flapping-fails"),
]


@pytest.mark.parametrize(("checks", "statuses"), TABLE)
def test_probe_table(checks: str, statuses: list[HealthStatus]) -> None:
    assert run(checks) == statuses


def test_observe_returns_only_changes() -> None:
    h = WorkerHealth(cfg(), now=0.0)
    assert h.changed_at == 0.0
    assert h.observe(True, 1.0) is None
    assert h.observe(True, 2.0) is R
    assert h.changed_at == 2.0
    assert h.observe(True, 3.0) is None
    assert [h.observe(False, t) for t in (4.0, 5.0, 6.0)] == [None, None, N]
    assert h.not_ready_since == 6.0
    assert h.observe(False, 305.9) is None
    assert h.observe(False, 306.0) is F
    assert h.not_ready_since == 6.0
    assert h.observe(True, 307.0) is None
    assert h.observe(True, 308.0) is R
    assert h.not_ready_since is None


def test_failed_is_judged_at_any_check_while_not_ready() -> None:
    h = WorkerHealth(cfg(health_success_threshold=3), now=0.0)
    for t in (1.0, 2.0, 3.0):
        h.observe(False, t)
    assert h.status is N
    assert h.observe(True, 200.0) is None
    assert h.observe(True, 303.0) is F  # still not ready after 300 s, though probes now pass
    assert h.observe(True, 304.0) is R


def test_pending_worker_fails_after_not_ready_long_enough() -> None:
    # not_ready at the 3rd probe (t=180); failed 300 s later, at the 8th (t=480)
    assert run("-" * 7) == [P, P, N, N, N, N, N]
    assert run("-" * 8)[-1] is F
    assert run("-" * 7, health_failed_after_secs=240.0)[-1] is F


def test_routable_only_when_ready() -> None:
    assert [s.routable for s in (P, R, N, F)] == [False, True, False, False]
    h = WorkerHealth(cfg(health_success_threshold=1))
    assert not h.routable
    h.observe(True, 1.0)
    assert h.routable


def test_counters() -> None:
    h = WorkerHealth(cfg())
    h.observe(False, 1.0)
    h.observe(False, 2.0)
    assert (h.consecutive_failures, h.consecutive_successes) == (2, 0)
    h.observe(True, 3.0)
    assert (h.consecutive_failures, h.consecutive_successes) == (0, 1)


def test_thresholds_of_one() -> None:
    seq = run("+-+-", health_failure_threshold=1, health_success_threshold=1)
    assert seq == [R, N, R, N]


def test_status_values() -> None:
    assert [s.value for s in HealthStatus] == ["pending", "ready", "not_ready", "failed"]


def test_a_worker_not_ready_is_rechecked_soon_with_backoff_while_it_fails() -> None:
    h = WorkerHealth(HealthConfig(health_failure_threshold=3, health_success_threshold=2))
    assert h.recheck_in(60.0) == RECHECK_S  # registering: not checked yet
    delays = []
    for k in range(8):
        h.observe(False, float(k))
        delays.append(h.recheck_in(60.0))
    assert delays == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]  # doubling, capped
    assert h.recheck_in(0.3) == 0.3  # never later than the regular interval
    h.observe(True, 9.0)
    assert h.recheck_in(60.0) == RECHECK_S  # on its way to ready: the next check at once
    h.observe(True, 9.3)
    assert h.status is HealthStatus.READY and h.recheck_in(60.0) is None  # the interval will do


def test_a_failed_check_of_a_worker_answering_traffic_is_excused() -> None:
    """Passive health: answers since the previous check excuse a failed (slow) check."""
    h = WorkerHealth(cfg(health_failure_threshold=2, health_success_threshold=1), now=0.0)
    assert h.observe(True, 1.0, answered=0) is HealthStatus.READY
    for k in range(10):  # traffic flows between every two checks: failures never count
        assert h.observe(False, 2.0 + k, answered=5 * (k + 1)) is None
        assert h.status is R and h.consecutive_failures == 0
    assert h.excused_failures == 10
    # traffic stopped (the count does not move): the checks alone decide
    assert h.observe(False, 20.0, answered=50) is None
    assert h.observe(False, 21.0, answered=50) is N
    assert h.excused_failures == 10


def test_answers_excuse_nothing_unless_ready() -> None:
    h = WorkerHealth(cfg(health_failure_threshold=1, health_success_threshold=1), now=0.0)
    assert h.observe(False, 1.0, answered=3) is N  # pending: a failed check counts
    assert h.observe(False, 2.0, answered=6) is None  # not ready: still counts, stays down
    assert h.status is N and h.excused_failures == 0 and h.consecutive_failures == 2
    assert h.observe(True, 3.0, answered=6) is R


def test_an_excused_check_neither_counts_nor_breaks_a_streak() -> None:
    h = WorkerHealth(cfg(health_failure_threshold=2, health_success_threshold=1), now=0.0)
    h.observe(True, 1.0, answered=0)
    h.observe(False, 2.0, answered=0)  # counted: no answers since the last check
    assert h.consecutive_failures == 1
    h.observe(False, 3.0, answered=1)  # excused: the streak stays at one
    assert h.consecutive_failures == 1 and h.status is R
    assert h.observe(False, 4.0, answered=1) is N  # the second counted failure


def test_without_a_passive_signal_checks_alone_decide() -> None:
    h = WorkerHealth(cfg(health_failure_threshold=1, health_success_threshold=1), now=0.0)
    h.observe(True, 1.0)
    assert h.observe(False, 2.0) is N and h.excused_failures == 0
