"""Health checks of an HTTP worker (`HttpProber`): its health endpoint, the models it serves
(/v1/models: the model, its LoRA adapters and, from `owned_by`, its runtime) and, with
`--dp-aware`, its data-parallel size. Control-plane GETs through `HttpBackend.get_json`."""

from __future__ import annotations

import aiohttp

from smg.core import dp
from smg.core.health import ProbeResult
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.http import HttpBackend, ResponseTooLarge
from smg.pipeline.providers.openai import model_ids

PROBE_ERRORS = (TimeoutError, aiohttp.ClientError, OSError, ResponseTooLarge)


class HttpProber:
    """Health check of an HTTP worker: GET the health endpoint; learn the model from /v1/models
    (the way vLLM and SGLang servers announce what they serve): its first entry is the worker's
    model (unless registered with a `model_id`), the others (LoRA adapters) are routable by
    their ids too. /v1/models is read at every check: adapters come and go.

    With `dp_aware`, a server's data-parallel size is read once, as the Rust gateway does:
    `dp_size` of SGLang's `/server_info` (older servers: `/get_server_info`); a server with
    neither (vLLM) counts as one rank."""

    def __init__(
        self, backend: HttpBackend, endpoint: str, timeout_s: float, dp_aware: bool = False
    ) -> None:
        self.backend = backend
        self.endpoint = endpoint if endpoint.startswith("/") else "/" + endpoint
        self.timeout_s = timeout_s
        self.dp_aware = dp_aware

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        try:
            status, _ = await self.backend.get_json(worker, self.endpoint, self.timeout_s)
            if status != 200:
                return ProbeResult(ok=False, detail=f"{self.endpoint} answered {status}")
        except PROBE_ERRORS as exc:
            return ProbeResult(ok=False, detail=f"{type(exc).__name__}: {exc}")
        model_id = worker.model_id
        try:
            status, data = await self.backend.get_json(worker, "/v1/models", self.timeout_s)
            ids = model_ids(data) if status == 200 else ()
            runtime = _runtime_of(data) if status == 200 else None
        except PROBE_ERRORS as exc:
            if model_id is None:
                return ProbeResult(ok=False, detail=f"{type(exc).__name__}: {exc}")
            ids, runtime = (), None
        if model_id is None:
            if not ids:
                return ProbeResult(ok=False, detail="/v1/models named no model")
            model_id = ids[0]
        dp_size = None
        if self.dp_aware and worker.dp_size is None and dp.rank_of(worker.url) is None:
            try:
                dp_size = await self._dp_size(worker)
            except PROBE_ERRORS:  # unknown for now: asked again at the next check
                dp_size = None
        if not ids:  # healthy, and its list unreadable this time: keep what is known
            return ProbeResult(ok=True, model_id=model_id, runtime=runtime, dp_size=dp_size)
        # a model_id given at registration that the worker does not list: no adapters of it
        adapters = tuple(i for i in ids if i != model_id) if model_id in ids else ()
        return ProbeResult(
            ok=True, model_id=model_id, adapters=adapters, runtime=runtime, dp_size=dp_size
        )

    async def _dp_size(self, worker: WorkerSnapshot) -> int:
        for path in ("/server_info", "/get_server_info"):
            status, data = await self.backend.get_json(worker, path, self.timeout_s)
            if status == 200 and isinstance(data, dict):
                size = data.get("dp_size")
                return size if type(size) is int and size > 0 else 1
        return 1


# `owned_by` of a server's /v1/models entry -> its runtime (the Rust gateway's detection).
_OWNED_BY_RUNTIME = {"sglang": "sglang", "nvidia": "sglang", "vllm": "vllm"}


def _runtime_of(data: object) -> str | None:
    if isinstance(data, dict):
        items = data.get("data")
        if isinstance(items, list) and items and isinstance(items[0], dict):
            owned_by = items[0].get("owned_by")
            return _OWNED_BY_RUNTIME.get(owned_by) if isinstance(owned_by, str) else None
    return None
