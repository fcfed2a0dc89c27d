"""What `/readiness` answers, from a registry snapshot: pure (workers and flags in, status and
body out).

The Rust gateway's shape and reasons: 200 `{"status": "ready", "healthy_workers",
"total_workers"}`, else 503 `{"status": "not ready", "reason"}` ("draining", "insufficient
healthy workers"; in PD mode smg names the missing role). In IGW mode the body also carries
`models`: per model id, `{"ready", "healthy_workers", "total_workers"}`, a model being ready when
it has a healthy worker (a healthy prefill and a healthy decode worker in PD mode); the gateway
is ready when some model is (the Rust gateway: some healthy worker). A worker whose model is not
known yet counts in the totals only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

PREFILL, DECODE = "prefill", "decode"


class WorkerView(Protocol):
    @property
    def model_id(self) -> str | None: ...
    @property
    def worker_type(self) -> str: ...
    @property
    def healthy(self) -> bool: ...


def missing_role(workers: Sequence[WorkerView]) -> str | None:
    """The PD role with no healthy worker (prefill checked first), or None when PD can serve."""
    for role in (PREFILL, DECODE):
        if not any(w.worker_type == role and w.healthy for w in workers):
            return role
    return None


def model_ready(workers: Sequence[WorkerView], pd_mode: bool) -> bool:
    return missing_role(workers) is None if pd_mode else any(w.healthy for w in workers)


def per_model(workers: Sequence[WorkerView], pd_mode: bool) -> dict[str, dict[str, Any]]:
    by_model: dict[str, list[WorkerView]] = {}
    for w in workers:
        if w.model_id is not None:
            by_model.setdefault(w.model_id, []).append(w)
    return {
        model: {
            "ready": model_ready(ws, pd_mode),
            "healthy_workers": sum(1 for w in ws if w.healthy),
            "total_workers": len(ws),
        }
        for model, ws in sorted(by_model.items())
    }


def readiness(
    workers: Sequence[WorkerView], *, pd_mode: bool, igw: bool, draining: bool
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of `/readiness`."""
    if draining:
        return 503, {"status": "not ready", "reason": "draining"}
    healthy = sum(1 for w in workers if w.healthy)
    models = per_model(workers, pd_mode) if igw else None
    reason: str | None = None
    if models is not None:
        if not any(m["ready"] for m in models.values()):
            role = missing_role(workers) if pd_mode and healthy else None
            reason = f"no healthy {role} worker" if role else "insufficient healthy workers"
    elif pd_mode and (role := missing_role(workers)) is not None:
        reason = f"no healthy {role} worker"
    elif healthy == 0:
        reason = "insufficient healthy workers"
    body: dict[str, Any] = (
        {"status": "not ready", "reason": reason}
        if reason is not None
        else {"status": "ready", "healthy_workers": healthy, "total_workers": len(workers)}
    )
    if models is not None:
        body["models"] = models
    return (503 if reason is not None else 200), body
