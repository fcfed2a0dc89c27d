"""Power of two choices: sample two distinct candidates, take the one with fewer requests in flight.

The score is the live in-flight count (`Candidate.load`, the runner's `LoadCounter`), which rises
at dispatch and drops when a request finishes, as in the Rust gateway's fallback. Power of two is
only as good as the freshness of its signal: a polled board is up to one interval old, and its
KV-pressure barrier saturates near a full cache, so a report of 0.999 against 0.9 outweighed any
since-report credit and starved one engine of four (31 of 637 requests in the policy A/B).

With a load board (`loads`), a tie on in-flight (frequent at low concurrency) goes to the shorter
expected wait of `smg.pipeline.loads` (other gateways' traffic and KV pressure still count); every
pick credits the chosen worker with the request's tokens until its next report. Remaining ties go
to the first one sampled (the sample order is itself random).
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
        chosen = second if b.load < a.load else first
        if self._loads is None or self._now is None:
            return chosen
        board = self._loads.value
        if a.load == b.load:
            ids = (a.worker_id, b.worker_id)
            waits = expected_waits(board, ids, (a.load, b.load), self._params, self._now())
            if waits is not None and waits[1] < waits[0]:
                chosen = second
        tokens = len(request.tokens) if request.tokens else self._params.mean_prefill_tokens
        board.dispatched(candidates[chosen].worker_id).bump(tokens)
        return chosen

    def on_worker_removed(self, worker_id: str) -> None:
        pass
