"""Lifeguard local health awareness: a slow node probes more patiently."""

from __future__ import annotations


class Awareness:
    """Health score in [0, max_multiplier - 1]; 0 is healthy. Timeouts scale by score + 1."""

    __slots__ = ("_max", "score")

    def __init__(self, max_multiplier: int) -> None:
        self._max = max(1, max_multiplier)
        self.score = 0

    def apply(self, delta: int) -> int:
        self.score = min(self._max - 1, max(0, self.score + delta))
        return self.score

    def scale(self, duration_s: float) -> float:
        return duration_s * (self.score + 1)
