"""The replicated worker registry: each node publishes the workers it registered or removed.

Record (subkey ``f"w/{url}"`` of the publishing node): ``[action, spec, ts]`` with action
``"add"`` or ``"remove"`` and ts an HLC stamp ``(wall_ms, counter, node_id)``. A url is served iff
its latest record across *all* owners (max ts; the node id inside ts breaks ties) is an add, so a
remove published on node B beats an add published on node A when B's stamp is later; B's clock
observes A's stamp whenever B reads the registry (pass ``clock``), so a remove issued after B has
seen the add is always later.

Removes are records, not deletes (a delete could not override another owner's add). They are
live keys, re-put at every compaction, so they are bounded by the distinct urls each owner ever
removed, not by the number of operations.

Records of dead nodes stay: before the mesh compacts (which drops every owner that does not re-put
its own keys), each survivor calls ``adopt_orphans(live)`` and copies the dead owners' latest
records, stamps unchanged, under its own prefix, signed by itself: the adopter owns the copies.
`effective()` is unchanged by the copy.

Secrets are never replicated: a spec holds no ``api_key`` (`SPEC_FIELDS`), and `valid_value`, the
check every node runs on a peer's record before merging it, refuses a spec that has one. A node
that imports a worker calls it with its own ``--worker-api-key``. Every field is type- and
range-checked there too, so a malformed record is dropped (and counted), never imported.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from smg.mesh.hlc import HybridClock, Stamp
from smg.mesh.replica import Replica

__all__ = [
    "PREFIX",
    "SPEC_FIELDS",
    "HybridClock",
    "Stamp",
    "WorkerDirectory",
    "WorkerRecord",
    "public_spec",
    "valid_value",
]

PREFIX = "w/"
MAX_URL_CHARS = 2048
MAX_LABELS = 32
_UINT53 = 2**53 - 1


def _text(value: Any, limit: int) -> bool:
    return type(value) is str and len(value) <= limit


def _count(value: Any, limit: int) -> bool:
    return type(value) is int and 0 <= value <= limit


def _labels(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) <= MAX_LABELS
        and all(
            type(kv) is list and len(kv) == 2 and _text(kv[0], 128) and _text(kv[1], 512)
            for kv in value
        )
    )


# What a replicated worker spec may hold (AddWorker's fields but api_key), each with its check.
SPEC_FIELDS: dict[str, Any] = {
    "url": lambda v: _text(v, MAX_URL_CHARS) and bool(v),
    "worker_type": lambda v: _text(v, 32),
    "model_id": lambda v: v is None or _text(v, 512),
    "priority": lambda v: _count(v, 2**31),
    "cost": lambda v: type(v) in (int, float) and math.isfinite(v) and 0 <= v <= 1e12,
    "labels": _labels,
    "bootstrap_port": lambda v: v is None or _count(v, 65535),
    # sent only when set (a spec without them is what nodes before them accept)
    "runtime_type": lambda v: _text(v, 32) and bool(v),
    "provider": lambda v: _text(v, 32) and bool(v),  # an external provider's name
}


def public_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a worker spec that may leave this node (no credentials, known fields)."""
    return {k: v for k, v in spec.items() if k in SPEC_FIELDS}


def valid_value(subkey: str, value: Any) -> bool:
    """May a peer's value for `subkey` enter the worker directory? (schema, types, ranges)"""
    url = subkey[len(PREFIX) :]
    if not subkey.startswith(PREFIX) or not url or len(url) > MAX_URL_CHARS:
        return False
    if type(value) is not list or len(value) != 3:
        return False
    action, spec, ts = value
    if action not in ("add", "remove"):
        return False
    if not (
        type(ts) is list
        and len(ts) == 3
        and _count(ts[0], _UINT53)
        and _count(ts[1], _UINT53)
        and _text(ts[2], 255)
    ):
        return False
    if spec is None:
        return action == "remove"
    return (
        type(spec) is dict
        and spec.get("url") == url
        and all(k in SPEC_FIELDS and SPEC_FIELDS[k](v) for k, v in spec.items())
    )


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    owner: str
    url: str
    action: str  # "add" | "remove"
    spec: dict[str, Any] | None
    ts: Stamp

    def order(self) -> tuple[Stamp, bool]:
        return (self.ts, self.action == "remove")


def _parse(key: str, value: Any) -> WorkerRecord | None:
    owner, _, sub = key.partition("/")
    if not sub.startswith(PREFIX) or not isinstance(value, list) or len(value) != 3:
        return None
    action, spec, ts = value
    if action not in ("add", "remove") or not isinstance(ts, list) or len(ts) != 3:
        return None
    if not (isinstance(ts[0], int) and isinstance(ts[1], int) and isinstance(ts[2], str)):
        return None
    if spec is not None and not isinstance(spec, dict):
        return None
    return WorkerRecord(owner, sub[len(PREFIX) :], action, spec, (ts[0], ts[1], ts[2]))


class WorkerDirectory:
    def __init__(self, replica: Replica, node_id: str, clock: HybridClock | None = None) -> None:
        if replica.owner != node_id:
            raise ValueError("the directory publishes through its own node's replica")
        self.replica = replica
        self.node_id = node_id
        self.clock = clock
        self._cache: tuple[int, dict[str, WorkerRecord]] | None = None

    def publish_add(self, url: str, spec: dict[str, Any], ts: Stamp) -> None:
        self.replica.put(PREFIX + url, ["add", {**public_spec(spec), "url": url}, list(ts)])

    def publish_remove(self, url: str, ts: Stamp) -> None:
        self.replica.put(PREFIX + url, ["remove", None, list(ts)])

    def records(self) -> list[WorkerRecord]:
        out = []
        for key, value in self.replica.items().items():
            rec = _parse(key, value)
            if rec is not None:
                out.append(rec)
        return out

    def latest(self) -> dict[str, WorkerRecord]:
        """url -> its winning record across all owners (cached per replica version)."""
        if self._cache is not None and self._cache[0] == self.replica.version:
            return self._cache[1]
        best: dict[str, WorkerRecord] = {}
        for rec in self.records():
            cur = best.get(rec.url)
            if cur is None or rec.order() > cur.order():
                best[rec.url] = rec
        if self.clock is not None:
            for rec in best.values():
                self.clock.observe(rec.ts)
        self._cache = (self.replica.version, best)
        return best

    def effective(self) -> dict[str, dict[str, Any]]:
        """url -> spec for every url whose latest record is an add."""
        return {u: dict(r.spec or {}) for u, r in self.latest().items() if r.action == "add"}

    def removed(self) -> set[str]:
        """Urls whose latest record is a remove (to drop from the local registry)."""
        return {u for u, r in self.latest().items() if r.action == "remove"}

    def adopt_orphans(self, live: Collection[str]) -> int:
        """Copy the latest records of owners not in `live` under our prefix; returns how many."""
        live_set = set(live) | {self.node_id}
        mine = {r.url: r for r in self.records() if r.owner == self.node_id}
        best: dict[str, WorkerRecord] = {}
        for rec in self.records():
            if rec.owner in live_set:
                continue
            cur = best.get(rec.url)
            if cur is None or rec.order() > cur.order():
                best[rec.url] = rec
        copied = 0
        for url, rec in best.items():
            own = mine.get(url)
            if own is None or rec.order() > own.order():
                self.replica.put(PREFIX + url, [rec.action, rec.spec, list(rec.ts)])
                copied += 1
        return copied
