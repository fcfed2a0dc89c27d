"""Per-model routing policies: the launch `--policy` is every model's default; a worker's
`policy` label (the Rust gateway's policy hint, `labels: {"policy": ...}` or `policy` on
POST /workers) overrides it for that worker's model.

As in the Rust gateway's policy registry, the first worker of a model decides: its hint, or the
default when it has none; later workers' hints do not change a model's policy. A model's policy
is one instance for as long as the model is served (a round-robin counter, a hash ring and a
cache-aware policy's own trees keep their state across requests), made on first use by `make`;
a model whose policy is the default shares the default instance (and with it the cache-aware
trees the cache-index actor owns, which are already kept per model). Pure: no clock, no IO.
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

    __slots__ = ("_by_model", "_known", "_make", "default")

    def __init__(self, default: Policy, make: Callable[[str], Policy] | None = None) -> None:
        self.default = default
        self._make = make  # None: every model uses the default
        self._by_model: dict[str, Policy] = {}
        self._known: dict[str, set[str]] = {}  # worker ids per model at the last sync

    def for_model(self, model: str | None, workers: Sequence[WorkerSnapshot]) -> Policy:
        """The policy of `model`, whose workers (any health, registration order) are `workers`."""
        name = policy_hint(workers)
        if model is None or self._make is None or name is None or name == self.default.name:
            return self.default
        policy = self._by_model.get(model)
        if policy is None or policy.name != name:
            policy = self._by_model[model] = self._make(name)
            self._known[model] = {w.worker_id for w in workers}
        return policy

    def sync(self, by_model: Mapping[str, Sequence[WorkerSnapshot]]) -> None:
        """The registry changed (call once per new snapshot): a model no longer served loses its
        own policy, and the others forget the workers that left."""
        for model in [m for m in self._by_model if m not in by_model]:
            del self._by_model[model]
        for model, policy in self._by_model.items():
            now = {w.worker_id for w in by_model[model]}
            for worker_id in self._known.get(model, set()) - now:
                policy.on_worker_removed(worker_id)
        self._known = {m: {w.worker_id for w in by_model[m]} for m in self._by_model}

    def models(self) -> dict[str, str]:
        """model -> policy name, for the models that do not use the default."""
        return {model: policy.name for model, policy in self._by_model.items()}
