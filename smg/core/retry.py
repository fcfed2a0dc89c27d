"""Retry maths: how many attempts, how long to back off, which statuses are worth another try.

Attempts are counted the Rust gateway's way: `retry_max_retries` includes the first attempt, and
`disable_retries` is the same as `retry_max_retries=1`. The backoff before retry `n` (n=1 is the
wait before the second attempt) is

    base = min(initial * multiplier ** (n - 1), max)
    delay = min(max, base * uniform(1 - jitter, 1 + jitter))

so it always lies in [base * (1 - jitter), min(max, base * (1 + jitter))] and is never negative.
The random source is passed in, so tests (and simulations) are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from smg.config import RetryConfig, effective_max_attempts

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def is_retryable_status(status: int) -> bool:
    """Whether an upstream status is worth another attempt (the Rust gateway's default set).

    408/504 (timeouts), 500, 502 and 503 are often transient or specific to one worker. 429 is
    retryable because the retry is routed again and usually lands on a less loaded worker: one
    worker's full queue is not the fleet's. Other 4xx would fail the same way anywhere; 501 and
    505 are permanent.
    """
    return status in RETRYABLE_STATUSES


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int  # the first attempt included; 1 means no retries
    initial_backoff_s: float
    max_backoff_s: float
    multiplier: float
    jitter: float  # clamped to [0, 1]

    @classmethod
    def from_config(cls, cfg: RetryConfig) -> RetryPolicy:
        return cls(
            max_attempts=effective_max_attempts(cfg),
            initial_backoff_s=max(0.0, cfg.retry_initial_backoff_ms / 1000.0),
            max_backoff_s=max(0.0, cfg.retry_max_backoff_ms / 1000.0),
            multiplier=max(0.0, cfg.retry_backoff_multiplier),
            jitter=min(1.0, max(0.0, cfg.retry_jitter_factor)),
        )

    def base_delay_s(self, attempt: int) -> float:
        """The backoff before retry `attempt` (1-based) without jitter, capped."""
        if attempt < 1:
            raise ValueError(f"retry attempts are numbered from 1, got {attempt}")
        try:
            raw = self.initial_backoff_s * self.multiplier ** (attempt - 1)
        except OverflowError:
            return self.max_backoff_s
        return min(raw, self.max_backoff_s)

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        """The backoff before retry `attempt` (1-based), jittered; the cap applies after jitter."""
        base = self.base_delay_s(attempt)
        if self.jitter == 0.0:
            return base
        factor = rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(0.0, min(self.max_backoff_s, base * factor))

    def delays(self, rng: random.Random) -> Iterator[float]:
        """The backoffs between the attempts: `max_attempts - 1` of them."""
        for attempt in range(1, self.max_attempts):
            yield self.delay_s(attempt, rng)


def backoff_schedule(cfg: RetryConfig, rng: random.Random) -> Iterator[float]:
    """`RetryPolicy.from_config(cfg).delays(rng)`: the waits before each retry, in seconds."""
    return RetryPolicy.from_config(cfg).delays(rng)
