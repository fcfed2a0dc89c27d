import pytest

from smg.mesh.awareness import Awareness
from smg.mesh.broadcast_queue import BroadcastQueue, retransmit_limit
from smg.mesh.suspicion import (
    Suspicion,
    confirmations_wanted,
    suspicion_bounds_s,
    suspicion_timeout_s,
)


@pytest.mark.parametrize(
    ("n", "expected_min", "expected_max"),
    [(1, 4.0, 24.0), (5, 4.0, 24.0), (10, 4.0, 24.0), (100, 8.0, 48.0), (1000, 12.0, 72.0)],
)
def test_suspicion_bounds(n: int, expected_min: float, expected_max: float) -> None:
    low, high = suspicion_bounds_s(n, 1.0, 4, 6)
    assert low == pytest.approx(expected_min)
    assert high == pytest.approx(expected_max)


@pytest.mark.parametrize(
    ("c", "k", "expected"),
    [
        (0, 3, 30.0),  # no confirmations: max
        (1, 3, 30.0 - 25.0 * 0.5),  # log(2)/log(4) = 0.5
        (3, 3, 5.0),  # all k confirmations: min
        (7, 3, 5.0),  # clamped at min
        (0, 0, 5.0),  # nobody could confirm: min
    ],
)
def test_suspicion_timeout_table(c: int, k: int, expected: float) -> None:
    assert suspicion_timeout_s(c, k, 5.0, 30.0) == pytest.approx(expected)


def test_confirmations_wanted_caps_for_small_clusters() -> None:
    assert confirmations_wanted(4, 10) == 2
    assert confirmations_wanted(4, 3) == 0


def test_suspicion_deadline_shrinks_and_ignores_duplicates() -> None:
    s = Suspicion(10.0, 2, 4.0, 24.0, {"a"})
    assert s.deadline_s == pytest.approx(34.0)
    assert s.confirm("b")
    assert not s.confirm("b")
    mid = s.deadline_s
    assert 14.0 < mid < 34.0
    s.confirm("c")
    assert s.deadline_s == pytest.approx(14.0)


def test_awareness_is_clamped_and_scales() -> None:
    a = Awareness(8)
    assert a.apply(-1) == 0
    assert a.apply(20) == 7
    assert a.scale(0.5) == pytest.approx(4.0)


@pytest.mark.parametrize(("n", "expected"), [(1, 4), (9, 4), (10, 8), (99, 8), (100, 12)])
def test_retransmit_limit(n: int, expected: int) -> None:
    assert retransmit_limit(4, n) == expected


def test_queue_replaces_same_key_and_limits_transmits() -> None:
    q: BroadcastQueue[str] = BroadcastQueue(1)
    q.push("a", "a@1", 10)
    q.push("a", "a@2", 10)
    assert len(q) == 1
    assert q.take(5, 0, 100) == ["a@2"]  # limit 1 * ceil(log10 6) = 1
    assert len(q) == 0


def test_queue_fewest_transmitted_first_and_byte_budget() -> None:
    q: BroadcastQueue[str] = BroadcastQueue(3)
    q.push("old", "old", 10)
    assert q.take(5, 0, 100) == ["old"]
    q.push("new", "new", 10)
    q.push("big", "big", 95)
    # fewest transmits first (big, new: 0; newest first among ties), then old
    assert q.take(5, 2, 100) == ["big"]
    assert q.take(5, 2, 30) == ["new", "old"]
