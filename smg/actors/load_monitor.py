"""LoadMonitorActor: polls every worker's load and publishes a `LoadBoard` for the policies.

Every `interval_s` it fetches each registered worker's load (one task per worker, owned by the
actor; a worker still answering the previous poll is skipped) and folds the answers into a new
board, published into a `SnapshotCell`. gRPC workers answer `GetLoads` through the engine pool;
HTTP workers `/get_load` (SGLang), else `/v1/loads`. The fetch function is injected, so tests need
no network.

Engines that stream KV events also carry their load: the KV-events actor publishes each as an
`EngineLoadReported` event, which this actor subscribes to. A pushed report replaces the board
entry at once, and polls of that worker are skipped (their answers dropped) while the push is
younger than one interval.

A failed poll keeps the worker's last report, marked stale; after `3 x interval_s` a stale report
stops counting (`LoadBoard.usable`) and the worker reads as not reporting. A worker that leaves
the registry drops off the board at its `WorkerRemoved` event, and in any case on the next tick
(so events this actor missed cost nothing: it subscribes with `Delivery.DROP`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from smg.actors.event_bus import Delivery, EventBus
from smg.actors.messages import EngineLoadReported, Resync, WorkerRemoved
from smg.actors.runtime import Actor
from smg.config import RoutingConfig
from smg.core.dp import rank_of
from smg.core.snapshots import SnapshotCell, WorkerSnapshot
from smg.pipeline.backends.grpc_pool import EnginePool, is_grpc_url
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.loads import LoadBoard, WorkerLoad

log = structlog.get_logger("smg.load_monitor")

STALE_INTERVALS = 3
LOAD_AWARE_POLICIES = frozenset({"least_load", "power_of_two"})
"""Policies that read the load board."""


def monitoring_enabled(cfg: RoutingConfig, policies: Iterable[str] = ()) -> bool:
    """Poll unless `disable_load_monitoring` is set and no policy in use reads loads."""
    used = {cfg.policy, *policies}
    return not cfg.disable_load_monitoring or bool(used & LOAD_AWARE_POLICIES)


# --- messages -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PollTick:
    """Time to poll every worker."""


@dataclass(frozen=True, slots=True)
class PollResult:
    worker_id: str
    started: float
    load: WorkerLoad | None
    error: str = ""


# --- the actor ----------------------------------------------------------------------------------
class LoadFetch(Protocol):
    def __call__(self, worker: WorkerSnapshot) -> Awaitable[WorkerLoad]: ...


class LoadMonitorActor(Actor):
    def __init__(
        self,
        *,
        cell: SnapshotCell[LoadBoard],
        workers: Callable[[], Iterable[WorkerSnapshot]],
        fetch: LoadFetch,
        interval_s: float,
        events: EventBus | None = None,
    ) -> None:
        super().__init__()
        self.events = events
        self.cell = cell
        self.workers = workers
        self.fetch = fetch
        self.interval_s = interval_s
        self._polling: set[str] = set()
        self._known: set[str] = set()

    async def on_start(self) -> None:
        if self.events is not None:
            self.events.subscribe(self.ref, (EngineLoadReported, WorkerRemoved), Delivery.DROP)
        board = self.cell.value
        if board.max_age_s != STALE_INTERVALS * self.interval_s:
            self.cell.publish(replace(board, max_age_s=STALE_INTERVALS * self.interval_s))
        self.ref.tell(PollTick())
        self.every(self.interval_s, PollTick())

    async def handle(self, message: Any) -> Any:
        match message:
            case PollTick():
                self._tick()
            case PollResult():
                self._polling.discard(message.worker_id)
                self._on_result(message)
            case EngineLoadReported(worker_id=wid, load=record):
                try:
                    load = WorkerLoad.from_engine_load(record)
                except Exception as exc:  # a malformed record: keep the last good one
                    log.warning("load_push_unreadable", worker=wid, error=repr(exc))
                    return None
                now = self.clock.now()
                self._publish(self.cell.value.with_reports({wid: _stamped(load, now, True)}))
            case WorkerRemoved(worker=w):
                self._known.discard(w.worker_id)
                self._publish(self.cell.value.without((w.worker_id,)))
            case Resync():
                pass  # the next tick drops every worker the registry no longer has
            case _:
                raise TypeError(f"LoadMonitorActor: unexpected message {message!r}")
        return None

    def _tick(self) -> None:
        now = self.clock.now()
        board = self.cell.value
        workers = list(self.workers())
        present = self._known = {w.worker_id for w in workers}
        gone = [wid for wid in (board.loads.keys() | board.counters.keys()) if wid not in present]
        if gone:
            self._publish(board.without(gone))
        for w in workers:
            if w.worker_id in self._polling or self._pushed_recently(w.worker_id, now):
                continue
            self._polling.add(w.worker_id)
            self.spawn(self._poll(w, now), name=f"load:{w.worker_id}")

    async def _poll(self, worker: WorkerSnapshot, started: float) -> None:
        try:
            load: WorkerLoad | None = await self.fetch(worker)
            error = ""
        except Exception as exc:  # a failed poll marks the last report stale; it never crashes
            load, error = None, f"{type(exc).__name__}: {exc}"
        self.ref.tell(PollResult(worker.worker_id, started, load, error))

    def _on_result(self, result: PollResult) -> None:
        wid = result.worker_id
        board = self.cell.value
        if wid not in self._known:
            return  # removed while we asked
        current = board.loads.get(wid)
        if current is not None and current.pushed and current.timestamp >= result.started:
            return  # a push arrived meanwhile: it is newer
        if result.load is None:
            log.debug("load_poll_failed", worker=wid, error=result.error)
            self._publish(board.marked_stale(wid))
            return
        now = self.clock.now()
        self._publish(board.with_reports({wid: _stamped(result.load, now, False)}))

    def _pushed_recently(self, worker_id: str, now: float) -> bool:
        load = self.cell.value.loads.get(worker_id)
        return load is not None and load.pushed and now - load.timestamp < self.interval_s

    def _publish(self, board: LoadBoard) -> None:
        if board is not self.cell.value:
            self.cell.publish(board)


def _stamped(load: WorkerLoad, now: float, pushed: bool) -> WorkerLoad:
    return replace(load, timestamp=now, stale=False, pushed=pushed)


# --- the real fetch -----------------------------------------------------------------------------
def make_fetch(engines: EnginePool, backend: HttpBackend, *, timeout_s: float = 5.0) -> LoadFetch:
    """Fetch a worker's load: `GetLoads` for gRPC workers (already connected in `engines`),
    `GET /get_load` for HTTP ones, falling back to `/v1/loads` when that is missing. HTTP polls
    carry the worker's own credential (`HttpBackend.get_json`), as its requests do."""

    async def fetch(worker: WorkerSnapshot) -> WorkerLoad:
        if is_grpc_url(worker.url):
            return WorkerLoad.from_engine(await engines.client(worker.url).loads())
        for path in ("/get_load", "/v1/loads"):
            status, data = await backend.get_json(worker, path, timeout_s)
            if status == 404 and path == "/get_load":
                continue
            if status != 200:
                raise RuntimeError(f"{path} answered {status}")
            return WorkerLoad.from_http(data, rank=rank_of(worker.url))
        raise RuntimeError(f"{worker.url}: no load endpoint")

    return fetch
