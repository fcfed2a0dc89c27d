"""Control plane: health probes, /workers, /get_loads, /v1/models — in the Rust gateway's shapes.

Errors on /workers use that gateway's flat shape `{"error": "...", "code": "WORKER_NOT_FOUND"}`.
A worker URL the address policy refuses (link-local, metadata, outside the allowlist, ... see
`smg.core.worker_urls`) is 400 `INVALID_WORKER_URL`. A worker's `api_key` is its own credential;
without one the gateway sends `--worker-api-key` (resolved when a request is sent, so it never
sits in the worker's record), never the clients' key.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from smg.actors.messages import AddWorker, RemoveWorker, UpdateWorker
from smg.actors.registry import DuplicateWorker, normalize_url
from smg.actors.runtime import ActorRef, ActorStopped, AskTimeout
from smg.api import requests as rq
from smg.api.worker_body import FALLBACK_RUNTIME, BadWorkerBody, spec_fields, update_fields
from smg.api.worker_reports import flush_report, loads_report
from smg.config import POLICIES
from smg.config.not_yet import NOT_YET_VALUES
from smg.core.health import HealthStatus
from smg.core.readiness import readiness
from smg.core.snapshots import RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.core.worker_urls import DeniedWorkerUrl, InvalidWorkerUrl
from smg.flow.admission import Admission
from smg.pipeline.backends.address_guard import AddressGuard
from smg.pipeline.backends.flush import FlushFailed
from smg.pipeline.backends.grpc_pool import is_grpc_url
from smg.pipeline.policies.per_model import POLICY_LABEL
from smg.pipeline.tokenizer_source import worker_tokenizer_problem

_ADMIN_ASK_TIMEOUT_S = 10.0
_FLUSH_TIMEOUT_S = 30.0  # the whole fan-out; each worker's call has its own, shorter deadline

Flusher = Callable[[WorkerSnapshot], Awaitable[None]]  # raises FlushFailed


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
        "connection_mode": "grpc" if is_grpc_url(w.url) else "http",
        "runtime_type": w.runtime_type or FALLBACK_RUNTIME,
        "labels": dict(w.labels),
        "priority": w.priority,
        "cost": w.cost,
        "is_healthy": w.health is HealthStatus.READY,
        "status": w.health.value,
        "circuit_breaker": w.breaker.state.name.lower(),
        "load": w.counter.active,
        "bootstrap_port": w.bootstrap_port,
        **({"provider": w.provider} if w.provider else {}),
    }


async def _tokenizer_refusal(url: str, fields: dict[str, Any]) -> web.Response | None:
    """A gRPC worker naming a tokenizer (or chat template) this machine lacks: 400 at
    registration, naming it, rather than a worker that never becomes ready."""
    if not is_grpc_url(url):
        return None  # HTTP workers template and tokenize themselves
    problem = await asyncio.to_thread(worker_tokenizer_problem, dict(fields["labels"]))
    if problem is None:
        return None
    return _flat_error(400, "BAD_REQUEST", f"Invalid worker tokenizer: {problem}")


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
        igw: bool = False,
        flusher: Flusher | None = None,
    ) -> None:
        self.cell = registry_cell
        self.registry = registry
        self.admission = admission  # draining: readiness says so
        self.max_payload = max_payload
        self.url_guard = url_guard
        self.pd_mode = pd_mode
        self.igw = igw  # /readiness then reports each model
        self.flusher = flusher
        self.started = int(time.time())

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/liveness", self.health)
        r.add_get("/readiness", self.readiness)
        r.add_get("/v1/models", self.models)
        r.add_get("/get_loads", self.get_loads)
        r.add_post("/flush_cache", self.flush_cache)
        r.add_get("/workers", self.list_workers)
        r.add_post("/workers", self.add_worker)
        r.add_get("/workers/{worker_id}", self.get_worker)
        r.add_delete("/workers/{worker_id}", self.delete_worker)
        r.add_put("/workers/{worker_id}", self.replace_worker)
        r.add_patch("/workers/{worker_id}", self.update_worker)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def readiness(self, request: web.Request) -> web.Response:
        status, body = readiness(
            self.cell.value.workers,
            pd_mode=self.pd_mode,
            igw=self.igw,
            draining=self.admission.draining,
        )
        return _json(body, status)

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": self.started, "owned_by": "self_hosted"}
            for m in self.cell.value.models()
        ]
        return _json({"object": "list", "data": data})

    async def get_loads(self, request: web.Request) -> web.Response:
        return _json(loads_report(self.cell.value.workers))

    async def flush_cache(self, request: web.Request) -> web.Response:
        """Every worker's cache flushed at once (any health: the Rust gateway's choice)."""
        workers = self.cell.value.workers
        failures: dict[str, str] = {}

        async def one(w: WorkerSnapshot) -> None:
            if self.flusher is None:
                failures[w.url] = "cache flush is not available"
                return
            try:
                await self.flusher(w)
            except FlushFailed as exc:
                failures[w.url] = str(exc)
            except Exception as exc:  # a bug in one worker's flush must not lose the others'
                failures[w.url] = f"internal error ({type(exc).__name__})"

        try:
            async with asyncio.timeout(_FLUSH_TIMEOUT_S), asyncio.TaskGroup() as tg:
                for w in workers:
                    tg.create_task(one(w), name=f"flush:{w.worker_id}")
        except TimeoutError:
            for w in workers:
                failures.setdefault(w.url, f"no answer in {_FLUSH_TIMEOUT_S:g} s")
        status, body = flush_report(workers, failures)
        return _json(body, status)

    async def list_workers(self, request: web.Request) -> web.Response:
        """`?model=ID`: only the workers serving it (the counts too), as the Rust gateway."""
        workers = self.cell.value.workers
        model = request.query.get("model")
        if model is not None:
            workers = tuple(w for w in workers if w.model_id == model)
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

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        raw = await rq.read_body(request, self.max_payload)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _flat_error(400, "BAD_REQUEST", f"JSON syntax error: {exc}")
        if not isinstance(body, dict):
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: expected an object")
        return body

    async def add_worker(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
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
        try:
            fields = spec_fields(body)
        except BadWorkerBody as exc:
            return _flat_error(400, "BAD_REQUEST", str(exc))
        if (bad := await _tokenizer_refusal(url, fields)) is not None:
            return bad
        # the model's policy hint (IGW mode): `policy`, or the Rust gateway's `labels.policy`
        labels = dict(fields["labels"])
        policy = body.get("policy", labels.get(POLICY_LABEL))
        if policy is not None:
            if policy not in POLICIES or policy in NOT_YET_VALUES["--policy"]:
                return _flat_error(400, "BAD_REQUEST", f"Invalid policy {policy!r}")
            fields["labels"] = tuple(sorted({**labels, POLICY_LABEL: policy}.items()))
        msg = AddWorker(url=url, **fields)
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
        return await self._queued(wid, RemoveWorker(wid), "removal")

    async def update_worker(self, request: web.Request) -> web.Response:
        """PATCH: priority, cost, labels, api_key; what the body leaves out stays."""
        got = await self._id_and_body(request)
        if isinstance(got, web.Response):
            return got
        wid, body = got
        try:
            changes = update_fields(body)
        except BadWorkerBody as exc:
            return _flat_error(400, "BAD_REQUEST", str(exc))
        return await self._queued(wid, UpdateWorker(wid, tuple(changes.items())), "update")

    async def replace_worker(self, request: web.Request) -> web.Response:
        """PUT: the whole registration again (defaults for what it leaves out, no own api_key
        without one); its `url` must be the worker's (a new URL is DELETE + POST)."""
        got = await self._id_and_body(request)
        if isinstance(got, web.Response):
            return got
        wid, body = got
        w = self.cell.value.by_id.get(wid)
        if w is None:
            return _flat_error(404, "WORKER_NOT_FOUND", f"Worker {wid} not found")
        url = body.get("url")
        if not isinstance(url, str):
            return _flat_error(400, "BAD_REQUEST", "Invalid JSON data: missing field `url`")
        if normalize_url(url) != w.url:
            return _flat_error(
                400,
                "BAD_REQUEST",
                f"URL mismatch: worker has URL '{w.url}' but request body has '{url}'. "
                "URL changes are not supported via PUT. Use DELETE + POST instead.",
            )
        try:
            changes = spec_fields(body)
        except BadWorkerBody as exc:
            return _flat_error(400, "BAD_REQUEST", str(exc))
        if (bad := await _tokenizer_refusal(url, changes)) is not None:
            return bad
        return await self._queued(wid, UpdateWorker(wid, tuple(changes.items())), "update")

    async def _id_and_body(self, request: web.Request) -> tuple[str, dict[str, Any]] | web.Response:
        wid = self._worker_id(request)
        if isinstance(wid, web.Response):
            return wid
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        return wid, body

    async def _queued(self, wid: str, msg: RemoveWorker | UpdateWorker, what: str) -> web.Response:
        """Ask the registry; 202 in the Rust gateway's shape (its changes run as background
        jobs; here they are done when this answers), 404 for a worker it does not have."""
        try:
            done = await self.registry().ask(msg, _ADMIN_ASK_TIMEOUT_S)
        except (ActorStopped, AskTimeout):  # the worker's actor restarting: the client may retry
            return _flat_error(
                503, "SERVICE_UNAVAILABLE", f"Worker {wid} did not take the change; try again"
            )
        if done is None:
            return _flat_error(404, "WORKER_NOT_FOUND", f"Worker {wid} not found")
        return _json(
            {
                "status": "accepted",
                "worker_id": wid,
                "message": f"Worker {what} queued for background processing",
            },
            202,
        )
