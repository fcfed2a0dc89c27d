"""The retry core: attempt counting, the backoff table, jitter bounds and retryable statuses."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg.config import RetryConfig
from smg.core.retry import RetryPolicy, backoff_schedule, is_retryable_status


def policy(**kw: Any) -> RetryPolicy:
    return RetryPolicy.from_config(RetryConfig(**kw))


def test_defaults() -> None:
    p = RetryPolicy.from_config(RetryConfig())
    assert p == RetryPolicy(
        max_attempts=5, initial_backoff_s=0.05, max_backoff_s=30.0, multiplier=1.5, jitter=0.2
    )


@pytest.mark.parametrize(
    ("kw", "attempts"),
    [
        ({}, 5),
        ({"retry_max_retries": 1}, 1),
        ({"retry_max_retries": 3}, 3),
        ({"retry_max_retries": 0}, 1),
        ({"retry_max_retries": -2}, 1),
        ({"disable_retries": True}, 1),
        ({"disable_retries": True, "retry_max_retries": 9}, 1),
    ],
)
def test_max_attempts_counts_the_first_attempt(kw: dict[str, Any], attempts: int) -> None:
    p = policy(**kw)
    assert p.max_attempts == attempts
    assert len(list(p.delays(random.Random(0)))) == attempts - 1


@pytest.mark.parametrize(
    ("attempt", "base_s"),
    [
        (1, 0.1),
        (2, 0.2),
        (3, 0.4),
        (4, 0.8),
        (5, 1.0),  # capped
        (60, 1.0),
        (100_000, 1.0),  # the power overflows a float: still the cap
    ],
)
def test_base_delay_table(attempt: int, base_s: float) -> None:
    p = policy(
        retry_initial_backoff_ms=100,
        retry_max_backoff_ms=1000,
        retry_backoff_multiplier=2.0,
        retry_jitter_factor=0.0,
    )
    assert p.base_delay_s(attempt) == pytest.approx(base_s)
    assert p.delay_s(attempt, random.Random(1)) == pytest.approx(base_s)


def test_default_schedule_without_jitter() -> None:
    delays = list(backoff_schedule(RetryConfig(retry_jitter_factor=0.0), random.Random(0)))
    assert delays == pytest.approx([0.05, 0.075, 0.1125, 0.16875])


def test_seeded_schedule_is_reproducible_and_jittered() -> None:
    cfg = RetryConfig(retry_max_retries=8)
    a = list(backoff_schedule(cfg, random.Random(42)))
    b = list(backoff_schedule(cfg, random.Random(42)))
    c = list(backoff_schedule(cfg, random.Random(43)))
    assert a == b
    assert a != c
    p = RetryPolicy.from_config(cfg)
    for n, d in enumerate(a, start=1):
        base = p.base_delay_s(n)
        assert base * 0.8 <= d <= base * 1.2
        assert d != base  # jitter did something


def test_cap_applies_after_jitter() -> None:
    p = policy(
        retry_initial_backoff_ms=1000,
        retry_max_backoff_ms=1000,
        retry_backoff_multiplier=2.0,
        retry_jitter_factor=0.5,
    )
    rng = random.Random(7)
    delays = [p.delay_s(3, rng) for _ in range(500)]
    assert max(delays) == 1.0  # upward jitter is clipped to the cap...
    assert min(delays) >= 0.5  # ...downward jitter still spreads the herd
    assert min(delays) < 0.6


def test_jitter_is_clamped_so_delays_are_never_negative() -> None:
    p = policy(retry_jitter_factor=3.0)
    assert p.jitter == 1.0
    rng = random.Random(3)
    assert all(0.0 <= p.delay_s(1, rng) <= 0.1 for _ in range(500))
    assert policy(retry_jitter_factor=-0.5).jitter == 0.0


def test_attempt_numbers_start_at_one() -> None:
    with pytest.raises(ValueError):
        policy().delay_s(0, random.Random(0))


@given(
    initial_ms=st.integers(min_value=0, max_value=100_000),
    max_ms=st.integers(min_value=0, max_value=100_000),
    multiplier=st.floats(min_value=0.0, max_value=10.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    attempt=st.integers(min_value=1, max_value=2_000),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_delay_within_jitter_bounds(
    initial_ms: int, max_ms: int, multiplier: float, jitter: float, attempt: int, seed: int
) -> None:
    p = policy(
        retry_initial_backoff_ms=initial_ms,
        retry_max_backoff_ms=max_ms,
        retry_backoff_multiplier=multiplier,
        retry_jitter_factor=jitter,
    )
    base = p.base_delay_s(attempt)
    assert 0.0 <= base <= p.max_backoff_s
    d = p.delay_s(attempt, random.Random(seed))
    assert math.isfinite(d)
    eps = 1e-9 * max(1.0, base)
    assert base * (1 - jitter) - eps <= d <= min(p.max_backoff_s, base * (1 + jitter)) + eps
    assert d >= 0.0


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (200, False),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (413, False),
        (422, False),
        (429, True),
        (500, True),
        (501, False),
        (502, True),
        (503, True),
        (504, True),
        (505, False),
    ],
)
def test_is_retryable_status(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable
