"""Random: a uniformly random candidate, drawn from the injected generator."""

from __future__ import annotations

import random
from collections.abc import Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest


class RandomPolicy:
    __slots__ = ("_rng",)

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        if not candidates:
            return None
        return self._rng.randrange(len(candidates))

    def on_worker_removed(self, worker_id: str) -> None:
        pass
