"""Worker loads as the router sees them: what each engine last reported, plus what we sent since.

`WorkerLoad` is one engine's report (running and waiting requests, queued prompt tokens, KV-cache
usage, generation throughput), stamped with the monotonic time it arrived. A `LoadBoard` maps
worker id -> `WorkerLoad` and is published whole by the load monitor into a `SnapshotCell`.

Reports are seconds old by the time a policy reads them; without a correction, argmin over a stale
board sends a whole poll interval's arrivals to the same worker (incast). So each board also holds
one mutable `Dispatched` counter per worker (requests and prompt tokens routed there since its last
report), which the policies bump as they route (like `LoadCounter`: a message per dispatch would
cost more than the routing). A new board carries the counters of workers without a new report over
unchanged and starts a fresh one for each worker that did report.

`expected_waits` is the least-load score, shared by `least_load` and `power_of_two`:

    wait_i = (queued_tokens_i + dispatched_tokens_i) / throughput_i
             + kv_pressure_weight * k_i / (1 - k_i)

the time to drain what is ahead of a new request plus an M/M/1-style barrier on KV usage `k` that
diverges as the cache fills (preemption and recompute start there). Both terms are seconds.

Pure: no clock, no I/O; `now` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

KV_USAGE_CAP = 0.999
"""KV usage is clamped here so the barrier stays finite (0.15 s weight -> ~150 s at the cap)."""


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    running: int = 0
    waiting: int = 0
    queued_tokens: int | None = None
    """Uncached prompt tokens waiting to be prefilled; None when the engine does not say."""
    kv_usage: float | None = None
    """KV-cache usage, 0-1; None when unknown."""
    throughput: float = 0.0
    """Generation throughput, tokens/s; 0 when unknown."""
    timestamp: float = 0.0
    """Monotonic seconds when the report arrived."""
    stale: bool = False
    """The last poll of this worker failed; this is the report before it."""
    pushed: bool = False
    """Came from the engine (KV-event batch) rather than a poll."""

    @staticmethod
    def from_engine(d: Mapping[str, Any], now: float = 0.0) -> WorkerLoad:
        """From `EngineClient.loads()` (summed over DP ranks)."""
        queued = d.get("waiting_uncached_tokens")
        return WorkerLoad(
            running=int(d.get("running", 0)),
            waiting=int(d.get("waiting", 0)),
            queued_tokens=None if queued is None else int(queued),
            kv_usage=_usage(d.get("token_usage"), d.get("used_tokens"), d.get("max_total_tokens")),
            throughput=float(d.get("gen_throughput") or 0.0),
            timestamp=now,
        )

    @staticmethod
    def from_engine_load(rec: Any, now: float = 0.0) -> WorkerLoad:
        """From a KV-event batch's `EngineLoad` message (read by attribute; no proto import)."""
        return WorkerLoad(
            running=int(rec.running_requests),
            waiting=int(rec.waiting_requests),
            queued_tokens=int(rec.waiting_uncached_tokens),
            kv_usage=float(rec.token_usage),
            throughput=float(rec.gen_throughput),
            timestamp=now,
            pushed=True,
        )

    @staticmethod
    def from_http(body: Any, now: float = 0.0, rank: int | None = None) -> WorkerLoad:
        """From an HTTP engine's `/get_load` (SGLang: a list with one dict per DP rank, `num_reqs`
        counting running and waiting) or `/v1/loads` (`{"loads": [per-rank snapshots]}`). A rank
        worker's (`--dp-aware`: `rank`) is its rank's entry (`dp_rank`), when the report has one;
        otherwise the ranks are summed."""
        ranks = body.get("loads", []) if isinstance(body, Mapping) else body
        if isinstance(ranks, Mapping):
            ranks = [ranks]
        if not isinstance(ranks, list) or not all(isinstance(r, Mapping) for r in ranks):
            raise ValueError(f"unexpected load report: {str(body)[:200]!r}")
        if rank is not None:
            ranks = [r for r in ranks if r.get("dp_rank") == rank] or ranks
        running = waiting = 0
        queued: int | None = None
        usages: list[float] = []
        throughput = 0.0
        for r in ranks:
            w = int(r.get("num_waiting_reqs", 0))
            waiting += w
            if "num_running_reqs" in r:
                running += int(r["num_running_reqs"])
            else:
                running += max(0, int(r.get("num_reqs", 0)) - w)
            if "num_waiting_uncached_tokens" in r:
                queued = (queued or 0) + int(r["num_waiting_uncached_tokens"])
            u = _usage(
                r.get("token_usage"), r.get("num_used_tokens"), r.get("max_total_num_tokens")
            )
            if u is not None:
                usages.append(u)
            throughput += float(r.get("gen_throughput") or 0.0)
        return WorkerLoad(
            running=running,
            waiting=waiting,
            queued_tokens=queued,
            kv_usage=sum(usages) / len(usages) if usages else None,
            throughput=throughput,
            timestamp=now,
        )


def _usage(ratio: Any, used: Any, total: Any) -> float | None:
    if ratio is not None:
        return float(ratio)
    if used is not None and total:
        return float(used) / float(total)
    return None


class Dispatched:
    """Requests and prompt tokens routed to one worker since its last report (mutable)."""

    __slots__ = ("requests", "tokens")

    def __init__(self) -> None:
        self.requests = 0
        self.tokens = 0

    def bump(self, tokens: int) -> None:
        self.requests += 1
        self.tokens += tokens


@dataclass(frozen=True, slots=True)
class LoadBoard:
    loads: Mapping[str, WorkerLoad] = field(default_factory=dict)
    """worker id -> its last report."""
    max_age_s: float = math.inf
    """A stale report older than this is ignored (the worker reads as not reporting)."""
    counters: dict[str, Dispatched] = field(default_factory=dict, compare=False, repr=False)

    def usable(self, worker_id: str, now: float) -> WorkerLoad | None:
        """The worker's report, unless it is missing or stale and older than `max_age_s`."""
        load = self.loads.get(worker_id)
        if load is None or (load.stale and now - load.timestamp > self.max_age_s):
            return None
        return load

    def dispatched(self, worker_id: str) -> Dispatched:
        """The worker's since-report counter (created on first use)."""
        counter = self.counters.get(worker_id)
        if counter is None:
            counter = self.counters[worker_id] = Dispatched()
        return counter

    def with_reports(self, reports: Mapping[str, WorkerLoad]) -> LoadBoard:
        """A new board with `reports` applied; reporting workers start a fresh counter unless the
        report is only the old one marked stale."""
        counters = dict(self.counters)
        for wid, load in reports.items():
            if not load.stale:
                counters.pop(wid, None)
        return LoadBoard({**self.loads, **reports}, self.max_age_s, counters)

    def marked_stale(self, worker_id: str) -> LoadBoard:
        load = self.loads.get(worker_id)
        if load is None or load.stale:
            return self
        return self.with_reports({worker_id: replace(load, stale=True)})

    def without(self, worker_ids: Iterable[str]) -> LoadBoard:
        gone = set(worker_ids)
        if not gone & (self.loads.keys() | self.counters.keys()):
            return self
        return LoadBoard(
            {k: v for k, v in self.loads.items() if k not in gone},
            self.max_age_s,
            {k: v for k, v in self.counters.items() if k not in gone},
        )


class BoardCell(Protocol):
    """Where a policy reads the current board: a `SnapshotCell[LoadBoard]`."""

    @property
    def value(self) -> LoadBoard: ...


class FixedBoard:
    """A `BoardCell` that never changes (no monitor: every worker reads as not reporting)."""

    __slots__ = ("value",)

    def __init__(self, value: LoadBoard | None = None) -> None:
        self.value = value if value is not None else LoadBoard()


@dataclass(frozen=True, slots=True)
class WaitParams:
    kv_pressure_weight: float = 0.15
    default_throughput: float = 2000.0
    mean_prefill_tokens: int = 1024


def kv_barrier(usage: float | None) -> float:
    """k / (1 - k): 0 when empty, 1 at half full, 9 at 90 %, ~1000 at the cap."""
    if usage is None:
        return 0.0
    k = min(max(usage, 0.0), KV_USAGE_CAP)
    return k / (1.0 - k)


def expected_wait(load: WorkerLoad, dispatched: Dispatched | None, params: WaitParams) -> float:
    """Seconds a new request would wait on a reporting worker."""
    queued = load.queued_tokens
    if queued is None:  # the engine reports a waiting count but not its tokens
        queued = load.waiting * params.mean_prefill_tokens
    inflight = dispatched.tokens if dispatched is not None else 0
    throughput = load.throughput if load.throughput > 0 else params.default_throughput
    return (queued + inflight) / throughput + params.kv_pressure_weight * kv_barrier(load.kv_usage)


def expected_waits(
    board: LoadBoard,
    worker_ids: Sequence[str],
    in_flight: Sequence[int],
    params: WaitParams,
    now: float,
) -> list[float] | None:
    """The expected wait of each worker; None when none of them reports (the caller then falls
    back to in-flight counts).

    A worker without a usable report among reporting peers is scored from its in-flight count:
    `in_flight * mean_prefill_tokens / fleet throughput` (the mean of the peers' positive
    throughputs, else the default), so it stays comparable in seconds.
    """
    loads = [board.usable(wid, now) for wid in worker_ids]
    if all(x is None for x in loads):
        return None
    rates = [x.throughput for x in loads if x is not None and x.throughput > 0]
    nominal = sum(rates) / len(rates) if rates else params.default_throughput
    out: list[float] = []
    for wid, load, n in zip(worker_ids, loads, in_flight, strict=True):
        if load is None:
            out.append(n * params.mean_prefill_tokens / nominal)
        else:
            out.append(expected_wait(load, board.counters.get(wid), params))
    return out
