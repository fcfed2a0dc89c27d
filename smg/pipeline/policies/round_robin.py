"""Round robin: the next candidate in turn (a counter modulo the number of candidates)."""

from __future__ import annotations

from collections.abc import Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest


class RoundRobinPolicy:
    __slots__ = ("_counter",)

    name = "round_robin"

    def __init__(self) -> None:
        self._counter = 0

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        if not candidates:
            return None
        index = self._counter % len(candidates)
        self._counter += 1
        return index

    def on_worker_removed(self, worker_id: str) -> None:
        pass
