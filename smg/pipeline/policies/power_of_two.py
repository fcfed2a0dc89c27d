"""Power of two choices: sample two distinct candidates, take the one with fewer requests in flight.

Ties go to the first one sampled. Loads are read from the candidates at call time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest


class PowerOfTwoPolicy:
    __slots__ = ("_rng",)

    name = "power_of_two"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        if n == 1:
            return 0
        first, second = self._rng.sample(range(n), 2)
        if candidates[second].load < candidates[first].load:
            return second
        return first

    def on_worker_removed(self, worker_id: str) -> None:
        pass
