"""Messages between the gateway's long-lived actors: plain frozen data, dispatched with `match`.

Two kinds: requests to one actor (to a worker, to the registry), and events: what happened to a
worker or came in from the mesh, published on the `EventBus` (`smg.actors.event_bus`) to every
actor that subscribed to its type. An event names the worker by its snapshot as it was when the
event happened; a subscriber that needs the present reads the registry's snapshot (events are
news, the snapshot is the truth), so an event that arrives late never undoes a newer state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from smg.core.circuit_breaker import BreakerState
from smg.core.health import HealthStatus
from smg.core.snapshots import WorkerSnapshot

if TYPE_CHECKING:
    from smg_grpc_proto.generated.common_pb2 import EngineLoad


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
    api_key: str | None = field(default=None, repr=False)
    worker_type: str = "regular"
    model_id: str | None = None
    priority: int = 50
    cost: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()
    bootstrap_port: int | None = None  # a prefill worker's KV bootstrap port (PD mode)
    imported: bool = False  # from the mesh's directory (not announced back to it)
    runtime_type: str | None = None  # None: detected by the probes
    provider: str | None = None  # an external provider's name (runtime_type "external")


@dataclass(frozen=True, slots=True)
class UpdateWorker:
    """Change a worker's registration in place (PATCH / PUT /workers/{id}): the registry hands it
    to the worker's actor, the owner of its snapshot. `changes` are `WorkerSnapshot` fields and
    their new values (an api_key among them: kept out of repr, so out of every log). Answered
    with the new snapshot, or None for an unknown worker."""

    worker_id: str
    changes: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    imported: bool = False  # the mesh's directory changed it (not announced back to it)


@dataclass(frozen=True, slots=True)
class RemoveWorker:
    worker_id: str
    imported: bool = False  # the mesh's directory removed it (not announced back to it)


@dataclass(frozen=True, slots=True)
class ReleaseEngine:
    """The registry's own timer: close an engine's connection if no worker uses it again."""

    engine_url: str


@dataclass(frozen=True, slots=True)
class WorkerChanged:
    """A worker published a new snapshot."""

    snapshot: WorkerSnapshot


# --- events: worker lifecycle (published by the RegistryActor, in the order they happened) -------
@dataclass(frozen=True, slots=True)
class WorkerAdded:
    worker: WorkerSnapshot
    imported: bool  # imported from the mesh, rather than registered here (API, command line)


@dataclass(frozen=True, slots=True)
class WorkerRemoved:
    worker: WorkerSnapshot  # its last snapshot
    imported: bool  # removed because the mesh's directory said so


@dataclass(frozen=True, slots=True)
class WorkerUpdated:
    """A worker's registration changed in place (PATCH / PUT, or a peer's change imported)."""

    worker: WorkerSnapshot  # the snapshot with the change
    imported: bool  # changed because the mesh's directory said so


@dataclass(frozen=True, slots=True)
class WorkerHealthChanged:
    worker: WorkerSnapshot  # the snapshot with the new status
    health: HealthStatus


@dataclass(frozen=True, slots=True)
class WorkerBreakerChanged:
    worker: WorkerSnapshot
    state: BreakerState


@dataclass(frozen=True, slots=True)
class WorkerModelChanged:
    """A worker's first probe told its model (workers registered without `model_id`)."""

    worker: WorkerSnapshot
    model_id: str


@dataclass(frozen=True, slots=True)
class EngineLoadReported:
    """An engine pushed its load with a KV-event batch (published by the KvEventsActor; the
    load monitor reads it with `WorkerLoad.from_engine_load`)."""

    worker_id: str
    load: EngineLoad  # the engine's record, as sent


# --- events: mesh imports (published by the mesh's actors) --------------------------------------
@dataclass(frozen=True, slots=True)
class MeshDocumentsChanged:
    """A peer's update changed these replicated documents (namespaces: "workers", "cache", ...).
    Level-triggered: the documents hold the news, so one notice covers any number of updates."""

    namespaces: frozenset[str]


@dataclass(frozen=True, slots=True)
class CacheHintsImported:
    """Other nodes' cache summaries that changed: per worker id, its prefix hashes (most recent
    first). For the cache-index actor, which owns the hints."""

    hints: tuple[tuple[str, tuple[bytes, ...]], ...]


# --- from the bus itself ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Resync:
    """Events for this subscriber were dropped (its mailbox was full): rebuild what it derives
    from them from the registry's snapshot. Sent once per overflow, ahead of queued messages."""
