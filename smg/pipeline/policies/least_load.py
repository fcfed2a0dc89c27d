"""Least load: route to the worker with the shortest expected wait (see `smg.pipeline.loads`).

The wait is the worker's queued prompt tokens plus the tokens we dispatched to it since its last
report, over its throughput, plus a KV-pressure barrier that climbs steeply as its cache fills.
The request being routed is credited to the chosen worker: its token count when known (gRPC),
else `mean_prefill_tokens`, so one stale report does not draw every arrival until the next poll.

With `max_waiting_requests` > 0, a worker whose reported waiting requests plus dispatches since the
report have reached the cap is skipped, unless every worker has. Ties go to fewer requests in
flight, then to candidate order. When no candidate reports a load (no monitor, cold start), this
is join-the-shortest-queue on requests in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from smg.pipeline.loads import BoardCell, FixedBoard, LoadBoard, WaitParams, expected_waits
from smg.pipeline.policies.base import Candidate, RouteRequest


class LeastLoadPolicy:
    __slots__ = ("_loads", "_max_waiting", "_now", "params")

    name = "least_load"

    def __init__(
        self,
        loads: BoardCell | None,
        now: Callable[[], float],
        *,
        params: WaitParams | None = None,
        max_waiting_requests: int = 0,
    ) -> None:
        self._loads: BoardCell = loads if loads is not None else FixedBoard()
        self._now = now
        self.params = params or WaitParams()
        self._max_waiting = max_waiting_requests

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        board = self._loads.value
        now = self._now()
        ids = [c.worker_id for c in candidates]
        in_flight = [c.load for c in candidates]
        pool = range(n)
        if self._max_waiting > 0:
            open_ = [i for i in pool if not self._full(board, ids[i], now)]
            if open_:
                pool = open_  # type: ignore[assignment]
        waits = expected_waits(board, ids, in_flight, self.params, now)
        scores: Sequence[float] = waits if waits is not None else in_flight
        best = min(pool, key=lambda i: (scores[i], in_flight[i], i))
        tokens = len(request.tokens) if request.tokens else self.params.mean_prefill_tokens
        board.dispatched(ids[best]).bump(tokens)
        return best

    def _full(self, board: LoadBoard, worker_id: str, now: float) -> bool:
        load = board.usable(worker_id, now)
        if load is None:
            return False
        counter = board.counters.get(worker_id)
        sent = counter.requests if counter is not None else 0
        return load.waiting + sent >= self._max_waiting

    def on_worker_removed(self, worker_id: str) -> None:
        pass  # the load monitor drops the worker from the board
