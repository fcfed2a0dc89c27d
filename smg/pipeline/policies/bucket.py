"""Bucket: each worker serves one range of prompt lengths, so similar lengths batch together.

Meant for prefill pools, where a batch's cost follows its longest prompt. A prompt's length is its
token count, or its routing text's characters / 4 when it is not tokenized. Worker `j` (in worker
id order) takes lengths in `[cut[j-1], cut[j])`. The cuts start evenly spaced over
`[0, initial_max_length)` and are refitted every `adjust_interval_s` (on the injected `now`) to
the quantiles of the lengths seen in the last `window_s`, so each worker gets an equal share of
recent requests. A change in the worker set refits at once.

Imbalance overrides the buckets: when the most and least in-flight counts differ by more than
`balance_abs_threshold` and the most exceeds `balance_rel_threshold` x the least, the request goes
to the least loaded worker.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence

from smg.pipeline.policies.base import Candidate, RouteRequest, least_loaded

CHARS_PER_TOKEN = 4
INITIAL_MAX_LENGTH = 4096
MAX_SAMPLES = 4096


def quantile_cuts(lengths: Sequence[int], buckets: int) -> tuple[int, ...]:
    """`buckets - 1` cut points splitting sorted `lengths` into equal shares (non-decreasing)."""
    if buckets <= 1 or not lengths:
        return ()
    ordered = sorted(lengths)
    m = len(ordered)
    return tuple(ordered[min(m - 1, (j * m) // buckets)] for j in range(1, buckets))


def even_cuts(max_length: int, buckets: int) -> tuple[int, ...]:
    return tuple((j * max_length) // buckets for j in range(1, buckets))


class BucketPolicy:
    __slots__ = (
        "_cuts",
        "_ids",
        "_last_fit",
        "_now",
        "_samples",
        "adjust_interval_s",
        "balance_abs_threshold",
        "balance_rel_threshold",
        "window_s",
    )

    name = "bucket"

    def __init__(
        self,
        now: Callable[[], float],
        *,
        adjust_interval_s: float = 5.0,
        window_s: float | None = None,
        balance_abs_threshold: int = 64,
        balance_rel_threshold: float = 1.5,
    ) -> None:
        self._now = now
        self.adjust_interval_s = adjust_interval_s
        self.window_s = window_s if window_s is not None else 12 * adjust_interval_s
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self._samples: deque[tuple[float, int]] = deque(maxlen=MAX_SAMPLES)
        self._ids: tuple[str, ...] = ()
        self._cuts: tuple[int, ...] = ()
        self._last_fit = float("-inf")

    @property
    def cuts(self) -> tuple[int, ...]:
        return self._cuts

    @staticmethod
    def length(request: RouteRequest) -> int:
        if request.tokens is not None:
            return len(request.tokens)
        return len(request.text or "") // CHARS_PER_TOKEN

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        n = len(candidates)
        if n == 0:
            return None
        now = self._now()
        length = self.length(request)
        ids = tuple(sorted(c.worker_id for c in candidates))
        if ids != self._ids or now - self._last_fit >= self.adjust_interval_s:
            self._fit(ids, now)
        self._samples.append((now, length))
        if n == 1:
            return 0
        loads = [c.load for c in candidates]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo:
            return least_loaded(candidates)
        owner = self._ids[bisect.bisect_right(self._cuts, length)]
        return next(i for i, c in enumerate(candidates) if c.worker_id == owner)

    def _fit(self, ids: tuple[str, ...], now: float) -> None:
        horizon = now - self.window_s
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()
        if self._samples:
            self._cuts = quantile_cuts([x for _, x in self._samples], len(ids))
        elif ids != self._ids:
            self._cuts = even_cuts(INITIAL_MAX_LENGTH, len(ids))
        self._ids = ids
        self._last_fit = now

    def on_worker_removed(self, worker_id: str) -> None:
        pass  # the buckets follow the candidate set on the next call
