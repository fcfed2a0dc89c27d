"""Control plane: health probes, /workers, /get_loads, /v1/models — in the Rust gateway's shapes.

Errors on /workers use that gateway's flat shape `{"error": "...", "code": "WORKER_NOT_FOUND"}`.
A worker URL the address policy refuses (link-local, metadata, outside the allowlist, ... see
`smg.core.worker_urls`) is 400 `INVALID_WORKER_URL`. A worker's `api_key` is its own credential;
without one the gateway sends `--worker-api-key` (resolved when a request is sent, so it never
sits in the worker's record), never the clients' key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from smg import __version__
from smg.actors.messages import AddWorker, RemoveWorker
from smg.actors.registry import DuplicateWorker
from smg.actors.runtime import ActorRef
from smg.api import requests as rq
from smg.config import POLICIES
from smg.config.not_yet import NOT_YET_VALUES
from smg.core.health import HealthStatus
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.core.worker_urls import DeniedWorkerUrl, InvalidWorkerUrl
from smg.flow.admission import Admission
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.pd import readiness_gap
from smg.pipeline.policies.per_model import POLICY_LABEL

_ADMIN_ASK_TIMEOUT_S = 10.0


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(payload), status=status, content_type="application/json", headers=headers
    )


def _flat_error(status: int, code: str, message: str) -> web.Response:
    return _json({"error": message, "code": code}, status)


def worker_json(w: WorkerSnapshot) -> dict[str, Any]:
    return {
        "id": w.worker_id,
        "model_id": w.model_id,
        "url": w.url,
        "models": [{"id": m} for m in (w.model_id, *w.adapters)] if w.model_id else [],
        "worker_type": w.worker_type,
        "connection_mode": "grpc" if w.url.startswith("grpc") else "http",
        "labels": dict(w.labels),
        "priority": w.priority,
        "cost": w.cost,
        "is_healthy": w.health is HealthStatus.READY,
        "status": w.health.value,
        "circuit_breaker": w.breaker.state.name.lower(),
        "load": w.counter.active,
        "bootstrap_port": w.bootstrap_port,
    }


class AdminRoutes:
    def __init__(
        self,
        *,
        registry_cell: SnapshotCell[RegistrySnapshot],
        registry: Callable[[], ActorRef],
        admission: Admission,
        max_payload: int,
        url_guard: AddressGuard,
        pd_mode: bool = False,
    ) -> None:
        self.cell = registry_cell
        self.registry = registry
        self.admission = admission  # draining: readiness says so
        self.max_payload = max_payload
        self.url_guard = url_guard
        self.pd_mode = pd_mode
        self.started = int(time.time())

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/liveness", self.health)
        r.add_get("/readiness", self.readiness)
        r.add_get("/v1/models", self.models)
        r.add_get("/get_loads", self.get_loads)
        r.add_get("/workers", self.list_workers)
        r.add_post("/workers", self.add_worker)
        r.add_get("/workers/{worker_id}", self.get_worker)
        r.add_delete("/workers/{worker_id}", self.delete_worker)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def readiness(self, request: web.Request) -> web.Response:
        snap = self.cell.value
        healthy = sum(1 for w in snap.workers if w.healthy)
        if self.admission.draining:
            return _json({"status": "not ready", "reason": "draining"}, 503)
        if self.pd_mode:
            role = readiness_gap(snap.workers)
            if role is not None:
                reason = f"no healthy {role} worker"
                return _json({"status": "not ready", "reason": reason}, 503)
        if healthy == 0:
            return _json({"status": "not ready", "reason": "insufficient healthy workers"}, 503)
        return _json(
            {"status": "ready", "healthy_workers": healthy, "total_workers": len(snap.workers)}
        )

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": self.started, "owned_by": "self_hosted"}
            for m in self.cell.value.models()
        ]
        return _json({"object": "list", "data": data})

    async def get_loads(self, request: web.Request) -> web.Response:
        loads = [
            {"worker": w.url, "worker_id": w.worker_id, "model_id": w.model_id, "load": w.load}
            for w in self.cell.value.workers
        ]
        return _json(
            {
                "timestamp": datetime.now(UTC).isoformat(),
                "version": f"smg-{__version__}",
                "loads": loads,
            }
        )

    async def list_workers(self, request: web.Request) -> web.Response:
        workers = self.cell.value.workers
        stats = {"prefill_count": 0, "decode_count": 0, "regular_count": 0}
        for w in workers:
            key = f"{w.worker_type}_count"
            if key in stats:
                stats[key] += 1
        return _json(
            {"workers": [worker_json(w) for w in workers], "total": len(workers), "stats": stats}
        )

    def _worker_id(self, request: web.Request) -> str | web.Response:
        raw = request.match_info["worker_id"]
        try:
            return str(uuid.UUID(raw))
        except ValueError:
            return _flat_error(400, "BAD_REQUEST", f"Invalid worker_id '{raw}' (expected UUID)")

    async def get_worker(self, request: web.Request) -> web.Response:
        wid = self._worker_id(request)
        if isinstance(wid, web.Response):
            return wid
        w = self.cell.value.by_id.get(wid)
        if w is None:
            return _flat_error(404, "WORKER_NOT_FOUND", f"Worker {wid} not found")
        return _json(worker_json(w))

    async def add_worker(self, request: web.Request) -> web.Response:
        raw = await rq.read_body(request, self.max_payload)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _flat_error(400, "BAD_REQUEST", f"JSON syntax error: {exc}")
        if not isinstance(body, dict):
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: expected an object")
        url = body.get("url")
        if url is None:
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: missing field `url`")
        if not isinstance(url, str):
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: `url` must be a string")
        try:
            await self.url_guard.check(url)
        except DeniedWorkerUrl as exc:
            return _flat_error(400, "INVALID_WORKER_URL", f"Invalid worker URL {url!r}: {exc}")
        except InvalidWorkerUrl as exc:
            return _flat_error(
                400, "BAD_REQUEST", f"Invalid value for field 'worker_url': {url} - {exc}"
            )
        worker_type = body.get("worker_type", "regular")
        if worker_type not in ("regular", "prefill", "decode"):
            return _flat_error(400, "BAD_REQUEST", f"Invalid worker_type '{worker_type}'")
        bootstrap_port = body.get("bootstrap_port")
        if bootstrap_port is not None and (
            type(bootstrap_port) is not int or not 0 < bootstrap_port < 65536
        ):
            return _flat_error(
                400, "BAD_REQUEST", "Invalid JSON data: `bootstrap_port` must be a port or null"
            )
        api_key = body.get("api_key")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            return _flat_error(
                400, "BAD_REQUEST", "Invalid JSON data: `api_key` must be a non-empty string"
            )
        labels = body.get("labels") or {}
        if not isinstance(labels, dict):
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: `labels` must be an object")
        # the model's policy hint (IGW mode): `policy`, or the Rust gateway's `labels.policy`
        policy = body.get("policy", labels.get(POLICY_LABEL))
        if policy is not None:
            if policy not in POLICIES or policy in NOT_YET_VALUES["--policy"]:
                return _flat_error(400, "BAD_REQUEST", f"Invalid policy {policy!r}")
            labels = {**labels, POLICY_LABEL: policy}
        msg = AddWorker(
            url=url,
            api_key=api_key,
            worker_type=worker_type,
            model_id=body.get("model_id") if isinstance(body.get("model_id"), str) else None,
            priority=int(body.get("priority", 50)),
            cost=float(body.get("cost", 1.0)),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            bootstrap_port=bootstrap_port,
        )
        try:
            snap: WorkerSnapshot = await self.registry().ask(msg, _ADMIN_ASK_TIMEOUT_S)
        except DuplicateWorker as dup:
            return _flat_error(
                409,
                "WORKER_ALREADY_EXISTS",
                f"Worker already exists at URL '{url}' with ID {dup.worker_id}",
            )
        location = f"/workers/{snap.worker_id}"
        return _json(
            {
                "status": "accepted",
                "worker_id": snap.worker_id,
                "url": snap.url,
                "location": location,
                "message": "Worker addition queued for background processing",
            },
            202,
            headers={"Location": location},
        )

    async def delete_worker(self, request: web.Request) -> web.Response:
        wid = self._worker_id(request)
        if isinstance(wid, web.Response):
            return wid
        removed = await self.registry().ask(RemoveWorker(wid), _ADMIN_ASK_TIMEOUT_S)
        if removed is None:
            return _flat_error(404, "WORKER_NOT_FOUND", f"Worker {wid} not found")
        return _json(
            {
                "status": "accepted",
                "worker_id": wid,
                "message": "Worker removal queued for background processing",
            },
            202,
        )
