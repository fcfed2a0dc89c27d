"""Per-model routing policies: the launch `--policy` is every model's default; a worker's
`policy` label (the Rust gateway's policy hint, `labels: {"policy": ...}` or `policy` on
POST /workers) overrides it for that worker's model.

As in the Rust gateway's policy registry, a model's first worker decides (the first registered
of those serving it when it is first routed): its hint, or the default when it has none. Later
workers' hints, and that worker leaving, change nothing until the model's last worker leaves. A
model's own policy is one instance for as long as the model is served (a round-robin counter, a
hash ring and a cache-aware policy's own trees keep their state across requests), made by
`make`; a model whose policy is the default shares the default instance (and with it the
cache-aware trees the cache-index actor owns, which are already kept per model). Pure: no clock,
no IO.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.policies.base import Policy

POLICY_LABEL = "policy"


def policy_hint(workers: Sequence[WorkerSnapshot]) -> str | None:
    """The policy the first of a model's workers (registration order) asks for, if any."""
    if not workers:
        return None
    return dict(workers[0].labels).get(POLICY_LABEL)


class ModelPolicies:
    """Which policy picks among a model's workers."""

    __slots__ = ("_by_model", "_known", "_make", "_own", "default")

    def __init__(self, default: Policy, make: Callable[[str], Policy] | None = None) -> None:
        self.default = default
        self._make = make  # None: every model uses the default
        self._own: dict[str, Policy | None] = {}  # decided per model (None: the default)
        self._known: dict[str, set[str]] = {}  # worker ids per model at the last sync

    def for_model(self, model: str | None, workers: Sequence[WorkerSnapshot]) -> Policy:
        """The policy of `model`, whose workers (any health, registration order) are `workers`:
        decided the first time the model is routed, kept until it is no longer served."""
        if model is None or self._make is None:
            return self.default
        try:
            own = self._own[model]
        except KeyError:
            name = policy_hint(workers)
            own = None if name is None or name == self.default.name else self._make(name)
            self._own[model] = own
            self._known[model] = {w.worker_id for w in workers}
        return self.default if own is None else own

    def sync(self, by_model: Mapping[str, Sequence[WorkerSnapshot]]) -> None:
        """The registry changed (call once per new snapshot): a model no longer served loses its
        decision (and its own policy, with its state), the others' own policies forget the
        workers that left."""
        for model in [m for m in self._own if m not in by_model]:
            del self._own[model]
        for model, own in self._own.items():
            now = {w.worker_id for w in by_model[model]}
            if own is not None:
                for worker_id in self._known.get(model, set()) - now:
                    own.on_worker_removed(worker_id)
            self._known[model] = now
        for model in [m for m in self._known if m not in self._own]:
            del self._known[model]

    def models(self) -> dict[str, str]:
        """model -> policy name, for the models that do not use the default."""
        return {model: own.name for model, own in self._own.items() if own is not None}
