"""Messages between the gateway's long-lived actors: plain frozen data, dispatched with `match`."""

from __future__ import annotations

from dataclasses import dataclass

from smg.core.snapshots import WorkerSnapshot


# --- to a WorkerActor ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    """A request to this worker finished; `success` as the circuit breaker counts it."""

    success: bool


@dataclass(frozen=True, slots=True)
class BreakerPoll:
    """The breaker's open timeout may have lapsed: move to half-open and publish."""


@dataclass(frozen=True, slots=True)
class ProbeTick:
    """Time for the next health check."""


# --- to the RegistryActor -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AddWorker:
    url: str
    api_key: str | None = None
    worker_type: str = "regular"
    model_id: str | None = None
    priority: int = 50
    cost: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()
    bootstrap_port: int | None = None  # a prefill worker's KV bootstrap port (PD mode)


@dataclass(frozen=True, slots=True)
class RemoveWorker:
    worker_id: str


@dataclass(frozen=True, slots=True)
class WorkerChanged:
    """A worker published a new snapshot."""

    snapshot: WorkerSnapshot
