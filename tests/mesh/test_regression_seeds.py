"""Seeds that once failed, or were the worst of a benchmark run, pinned as regression tests.

When a chaos test prints a failing seed, add it here with the scenario and size it failed at;
each entry replays that exact run in virtual time and asserts the scenario's target.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .chaos import detect_kill, heal_after_partition, over_seeds
from .statenet import state_heal

DETECT_P99_S = {3: 9.0, 5: 12.0, 10: 12.0, 20: 14.0}

# (scenario, n, seed, why)
PINNED: list[tuple[str, int, int, str]] = [
    ("detect", 3, 0, "worst of 50 seeds, bench 2026-11-23 (7.50 s)"),
    ("detect", 5, 28, "worst of 50 seeds, bench 2026-11-23 (7.55 s)"),
    ("detect", 10, 12, "worst of 50 seeds, bench 2026-11-23 (8.80 s)"),
    ("detect", 20, 42, "worst of 50 seeds, bench 2026-11-23 (10.10 s)"),
    ("heal", 10, 9, "the heal scenario's replay example; N=10 halves, heal p99 target 10 s"),
    ("state-heal", 10, 0, "first state-heal seed; heal -> identical digests"),
]

TARGETS: dict[str, Callable[[int], float]] = {
    "detect": lambda n: DETECT_P99_S[n],
    "heal": lambda n: 10.0,
    "state-heal": lambda n: 15.0,
}


def _run(scenario: str, n: int, seed: int) -> float:
    if scenario == "detect":
        return detect_kill(seed, n)
    if scenario == "heal":
        return heal_after_partition(seed, n)
    return state_heal(seed, n)


@pytest.mark.parametrize(
    ("scenario", "n", "seed", "why"), PINNED, ids=[f"{s}-n{n}-seed{x}" for s, n, x, _ in PINNED]
)
def test_pinned_seed(scenario: str, n: int, seed: int, why: str) -> None:
    took = over_seeds(scenario, n, range(seed, seed + 1), lambda s: _run(scenario, n, s))[seed]
    assert took <= TARGETS[scenario](n), f"{scenario} n={n} seed={seed} ({why}): {took:.2f} s"
