"""The bodies of the fan-out admin endpoints, in the Rust gateway's shapes: pure, no I/O.

`POST /flush_cache`: 200 `status: success` when every worker flushed, else 206 `partial_success`
with `successful` (URLs) and `failed` (`{worker, error}`); `GET /get_loads`: `{"workers":
[{"worker", "load"}]}`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.grpc_pool import is_grpc_url


def flush_report(
    workers: Sequence[WorkerSnapshot], failures: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    """`failures`: worker URL -> why it did not flush (every other worker flushed)."""
    successful = [w.url for w in workers if w.url not in failures]
    grpc_workers = sum(1 for w in workers if is_grpc_url(w.url))
    if not workers:
        message = "No workers available for cache flush"
    elif failures:
        message = f"Cache flush: {len(successful)} succeeded, {len(failures)} failed"
    else:
        message = f"Successfully flushed cache on all {len(successful)} workers"
    body: dict[str, Any] = {
        "status": "partial_success" if failures else "success",
        "message": message,
        "workers_flushed": len(successful),
        "total_http_workers": len(workers) - grpc_workers,
        "total_grpc_workers": grpc_workers,
        "total_zmq_workers_skipped": 0,
        "total_workers": len(workers),
    }
    if failures:
        body["successful"] = successful
        body["failed"] = [{"worker": url, "error": err} for url, err in failures.items()]
    return (206 if failures else 200), body


def loads_report(workers: Sequence[WorkerSnapshot]) -> dict[str, Any]:
    """`load`: the requests the gateway has in flight on the worker (the Rust gateway reports
    the engine's used KV tokens there, -1 when unknown; smg's routing counts requests)."""
    return {"workers": [{"worker": w.url, "load": w.load} for w in workers]}
