"""Power of two choices: sample two distinct candidates, take the one that will free up sooner.

With a load board (`loads`), "sooner" is the shorter expected wait of `smg.pipeline.loads` (the Rust
gateway's default `expected_wait` metric), and the chosen worker is credited with the request's
tokens until its next report. Without one, or while neither sampled worker reports, it is the
fewer requests in flight. Ties go to the first one sampled.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from smg.pipeline.loads import BoardCell, WaitParams, expected_waits
from smg.pipeline.policies.base import Candidate, RouteRequest


class PowerOfTwoPolicy:
    __slots__ = ("_loads", "_now", "_params", "_rng")

    name = "power_of_two"

    def __init__(
        self,
        rng: random.Random,
        *,
        loads: BoardCell | None = None,
        now: Callable[[], float] | None = None,
        params: WaitParams | None = None,
    ) -> None:
        self._rng = rng
        self._loads = loads
        self._now = now
        self._params = params or WaitParams()

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        if n == 1:
            return 0
        first, second = self._rng.sample(range(n), 2)
        a, b = candidates[first], candidates[second]
        if self._loads is None or self._now is None:
            return second if b.load < a.load else first
        board = self._loads.value
        waits = expected_waits(
            board, (a.worker_id, b.worker_id), (a.load, b.load), self._params, self._now()
        )
        if waits is None:
            chosen = second if b.load < a.load else first
        else:
            chosen = second if waits[1] < waits[0] else first
        tokens = len(request.tokens) if request.tokens else self._params.mean_prefill_tokens
        board.dispatched(candidates[chosen].worker_id).bump(tokens)
        return chosen

    def on_worker_removed(self, worker_id: str) -> None:
        pass
