"""Lifeguard dynamic suspicion: the timeout shrinks as independent confirmations arrive."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def suspicion_bounds_s(
    n: int, probe_interval_s: float, suspicion_mult: int, max_timeout_mult: int
) -> tuple[float, float]:
    """(min, max) timeouts. The log10 scale is floored at 1 as memberlist does, so that
    tiny clusters (n < 10) still wait suspicion_mult probe intervals."""
    scale = max(1.0, math.log10(max(1, n)))
    low = suspicion_mult * scale * probe_interval_s
    return low, max_timeout_mult * low


def suspicion_timeout_s(confirmations: int, k: int, min_s: float, max_s: float) -> float:
    """max - (max - min) * log(c + 1) / log(k + 1), clamped to [min, max]."""
    if k < 1:
        return min_s
    frac = math.log(confirmations + 1) / math.log(k + 1)
    return max(min_s, min(max_s, max_s - (max_s - min_s) * frac))


def confirmations_wanted(suspicion_mult: int, n: int) -> int:
    """memberlist's k: suspicion_mult - 2, or 0 when too few other members could confirm."""
    k = suspicion_mult - 2
    return 0 if n - 2 < k else k


@dataclass(slots=True)
class Suspicion:
    """A running suspicion timer about one member (pure: deadline derived from `start_s`)."""

    start_s: float
    k: int
    min_s: float
    max_s: float
    confirmers: set[str] = field(default_factory=set)

    def confirm(self, from_node: str) -> bool:
        """Record a confirmation; True if it was new (and so worth re-gossiping)."""
        if from_node in self.confirmers:
            return False
        self.confirmers.add(from_node)
        return True

    @property
    def deadline_s(self) -> float:
        # The first confirmer is the node that raised the suspicion; it does not count.
        c = max(0, len(self.confirmers) - 1)
        return self.start_s + suspicion_timeout_s(c, self.k, self.min_s, self.max_s)
