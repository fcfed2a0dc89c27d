"""Immutable views the actors publish for the hot path (value types: any layer may read them).

Owners build a new snapshot on every change and swap it into a `SnapshotCell`; readers take
`cell.value` and use it for the whole request. The one mutable piece is `LoadCounter`, the
in-flight count per worker, which the request path bumps directly (the asyncio equivalent of the
Rust gateway's atomic counter: a message per increment would cost more than the routing itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from smg.core.circuit_breaker import BreakerSnapshot, BreakerState
from smg.core.health import HealthStatus

T = TypeVar("T")


class SnapshotCell(Generic[T]):
    __slots__ = ("value", "version")

    def __init__(self, value: T) -> None:
        self.value = value
        self.version = 0

    def publish(self, value: T) -> None:
        self.value = value
        self.version += 1


class LoadCounter:
    """A worker's mutable tallies, read at scrape time: `active`/`processed` are written by the
    request path; the breaker's and the probes' by the worker's own actor (one writer each)."""

    __slots__ = (
        "active",
        "answered",
        "cb_failure_streak",
        "cb_failures",
        "cb_success_streak",
        "cb_successes",
        "probes_excused",
        "probes_failed",
        "probes_ok",
        "processed",
    )

    def __init__(self) -> None:
        self.active = 0
        self.processed = 0
        self.answered = 0  # attempts that ended well (the request path): passive health
        self.cb_successes = 0  # outcomes the breaker recorded
        self.cb_failures = 0
        self.cb_failure_streak = 0  # the breaker's consecutive counts, as of its last outcome
        self.cb_success_streak = 0
        self.probes_ok = 0  # health checks
        self.probes_failed = 0
        self.probes_excused = 0  # failed checks not counted: the worker was answering traffic


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    worker_id: str
    url: str
    model_id: str | None
    worker_type: str
    health: HealthStatus
    breaker: BreakerSnapshot
    counter: LoadCounter = field(compare=False)
    api_key: str | None = field(default=None, repr=False)
    priority: int = 50
    cost: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()
    bootstrap_port: int | None = None  # a prefill worker's KV bootstrap port (PD mode)
    # The engine behind it ("sglang", "vllm", ...): as registered, else as the probes detected it
    # (None until then; shown as the Rust gateway's fallback, "sglang").
    runtime_type: str | None = None
    # an external provider's name ("openai", "anthropic", ...): its requests are translated by
    # smg.pipeline.providers and its health is its model listing; None: an engine's server
    provider: str | None = None
    # other ids the worker serves (LoRA adapters, from its /v1/models): routable like model_id
    adapters: tuple[str, ...] = ()
    # the engine's data-parallel ranks, as its probe reported them (None: not asked); with
    # `--dp-aware` the registry makes one worker per rank of it (smg.core.dp)
    dp_size: int | None = None
    # The breaker needs to hear about successes only while it is counting something.
    breaker_counting: bool = False
    # Where the request path reports outcomes (the worker's own actor); set once it runs.
    ref: Any = field(default=None, compare=False, repr=False)

    @property
    def load(self) -> int:
        return self.counter.active

    @property
    def healthy(self) -> bool:
        return self.health is HealthStatus.READY

    def routable(self, now: float) -> bool:
        breaker = self.breaker  # a closed breaker allows without asking it (a call a request)
        return self.health is HealthStatus.READY and (
            breaker.state is not BreakerState.OPEN or breaker.allows(now)
        )


@dataclass(frozen=True, slots=True)
class RegistrySnapshot:
    workers: tuple[WorkerSnapshot, ...] = ()
    by_id: dict[str, WorkerSnapshot] = field(default_factory=dict)
    # model id (a LoRA adapter's too) -> every worker serving it (any health); routability is
    # checked per request
    by_model: dict[str, tuple[WorkerSnapshot, ...]] = field(default_factory=dict)

    @staticmethod
    def build(workers: tuple[WorkerSnapshot, ...]) -> RegistrySnapshot:
        by_model: dict[str, list[WorkerSnapshot]] = {}
        for w in workers:
            if w.model_id is not None:
                by_model.setdefault(w.model_id, []).append(w)
                for adapter in w.adapters:
                    by_model.setdefault(adapter, []).append(w)
        return RegistrySnapshot(
            workers=workers,
            by_id={w.worker_id: w for w in workers},
            by_model={m: tuple(ws) for m, ws in by_model.items()},
        )

    def models(self) -> list[str]:
        """Models with at least one healthy worker."""
        return [m for m, ws in self.by_model.items() if any(w.healthy for w in ws)]
