"""The list-then-watch state machine of a Kubernetes informer, sans IO.

The shell lists pods, hands the list to `relisted`, then watches from `resource_version` with
bookmarks on and feeds each watch event to `event`. Bookmarks only advance the resourceVersion;
an ERROR event whose Status says 410 Gone / Expired means the history the watch would resume
from is gone: `event` answers RELIST and the shell lists again. A stream that ends or drops is
re-watched from the last resourceVersion after `backoff_s`. A re-list replaces the pod set
whole, so a pod deleted while nobody watched is gone after it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from smg.core.pods import Pod, pod_from_json


class Step(Enum):
    CHANGED = "changed"  # the pod set changed: reconcile
    SAME = "same"  # nothing discovery cares about changed (a bookmark, a no-op update)
    RELIST = "relist"  # 410 Gone: the watch cannot resume; list again


class KubeError(Exception):
    """The API server refused or failed a request (status and reason only: no headers, no
    token)."""


class Gone(KubeError):
    """410: the resourceVersion asked for is older than the server's history: list again."""


class WatchError(Exception):
    """An ERROR event that is not 410, or an event that does not parse: re-watch with backoff."""


def is_gone(status: Any) -> bool:
    """A Status object (an ERROR event's object, or a failed list's body) saying 410 Expired."""
    if not isinstance(status, dict):
        return False
    return status.get("code") == 410 or status.get("reason") in ("Expired", "Gone")


@dataclass
class Informer:
    pods: dict[str, Pod] = field(default_factory=dict)  # namespace/name -> pod
    resource_version: str | None = None
    synced: bool = False  # a list has been seen

    def relisted(self, items: list[Any], resource_version: str) -> Step:
        pods: dict[str, Pod] = {}
        for obj in items:
            pod = pod_from_json(obj)
            if pod is not None:
                pods[pod.key] = pod
        changed = pods != self.pods or not self.synced
        self.pods, self.resource_version, self.synced = pods, resource_version, True
        return Step.CHANGED if changed else Step.SAME

    def event(self, ev: Any) -> Step:
        if not isinstance(ev, dict):
            raise WatchError("watch event is not an object")
        kind, obj = ev.get("type"), ev.get("object")
        if kind == "ERROR":
            if is_gone(obj):
                return Step.RELIST
            raise WatchError(f"watch ERROR event: {_status_text(obj)}")
        rv = _resource_version(obj)
        if kind == "BOOKMARK":
            if rv is not None:
                self.resource_version = rv
            return Step.SAME
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise WatchError(f"unknown watch event type {kind!r}")
        pod = pod_from_json(obj)
        if rv is not None:
            self.resource_version = rv
        if pod is None:
            return Step.SAME
        if kind == "DELETED":
            return Step.CHANGED if self.pods.pop(pod.key, None) is not None else Step.SAME
        if self.pods.get(pod.key) == pod:
            return Step.SAME
        self.pods[pod.key] = pod
        return Step.CHANGED


def _resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) and rv else None


def _status_text(obj: Any) -> str:
    if isinstance(obj, dict):
        return f"{obj.get('code')} {obj.get('reason')}: {str(obj.get('message'))[:200]}"
    return "malformed"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff with jitter: attempt n waits a random share (50-100%) of
    min(cap, base * 2**n); `rng` is injected so tests are deterministic."""

    base_s: float = 0.05
    cap_s: float = 10.0

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.cap_s, self.base_s * (2 ** min(attempt, 30)))
        return ceiling * (0.5 + 0.5 * rng.random())
