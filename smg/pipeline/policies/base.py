"""The routing-policy interface: what a policy is given and what it answers.

A policy picks one of the routable workers for a request. It is a pure object: no clock reads (a
`now` callable is injected where time matters), no module-level randomness (a `random.Random` is
injected), no I/O. The gateway passes only routable workers (healthy, breaker not open) in a stable
order; the list may differ from one call to the next, so policies key their state by worker id,
never by position.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from smg.core.records import record


class Candidate(Protocol):
    """A routable worker as the gateway sees it at selection time."""

    @property
    def worker_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def load(self) -> int:
        """Requests in flight on this worker right now."""
        ...


@record  # frozen to the type checker; a plain slots init (built on every request)
class RouteRequest:
    """What a policy may look at in a request."""

    text: str | None = None
    """Routing text: the concatenated message contents for chat, the prompt for completions."""
    tokens: Sequence[int] | None = None
    """Token ids (gRPC mode); when set, cache-aware routing keys on them instead of `text`."""
    routing_key: str | None = None
    """The `X-SMG-Routing-Key` header."""
    model: str | None = None


class Policy(Protocol):
    name: str

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> int | None:
        """Index into `candidates` of the chosen worker; None when there is none."""
        ...

    def on_worker_removed(self, worker_id: str) -> None:
        """Forget any state about a worker that left the registry."""
        ...


def least_loaded(candidates: Sequence[Candidate], indices: Iterable[int] | None = None) -> int:
    """Index of the candidate with the lowest load (the first one on ties).

    With `indices`, only those candidates are considered; they must not be empty.
    """
    pool = range(len(candidates)) if indices is None else indices
    best = -1
    best_load = 0
    for i in pool:
        load = candidates[i].load
        if best < 0 or load < best_load:
            best, best_load = i, load
    if best < 0:
        raise ValueError("least_loaded of no candidates")
    return best
