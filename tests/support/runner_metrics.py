"""A `RunnerMetrics` that records what the runner reported (for the flow and policy tests)."""

from __future__ import annotations

from smg.core.snapshots import WorkerSnapshot


class RecordingMetrics:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # (worker id, model, policy)
        self.retries = 0
        self.backoffs: list[tuple[int, float]] = []  # (attempt, delay)
        self.exhausted_count = 0
        self.failures: list[tuple[str, str]] = []  # (worker id, UpstreamError kind)
        self.statuses: list[int] = []

    def selected(self, worker: WorkerSnapshot, model: str, policy: str | None = None) -> None:
        self.seen.append((worker.worker_id, model, policy))

    def retried(self, worker: WorkerSnapshot, attempt: int, delay_s: float) -> None:
        self.retries += 1
        self.backoffs.append((attempt, delay_s))

    def exhausted(self, worker: WorkerSnapshot) -> None:
        self.exhausted_count += 1

    def upstream_failed(self, worker: WorkerSnapshot, kind: str) -> None:
        self.failures.append((worker.worker_id, kind))

    def upstream_answered(self, status: int) -> None:
        self.statuses.append(status)
