"""Health check of a provider worker: a provider has no health endpoint, so it is healthy while
it lists its models (`Provider.models_request` / `model_ids`) to the worker's key; every listed
id is routable (the first, unless the worker was registered with a `model_id`, is its model, the
others ride as its adapters). A refused key (401/403) is named as such in the probe's detail,
which the worker's health log line carries; the key itself never is."""

from __future__ import annotations

import aiohttp

from smg.core.health import ProbeResult
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.http import (
    CONTROL_BODY_BYTES,
    UNWATCHED,
    HttpBackend,
    read_capped,
)
from smg.pipeline.backends.http_probe import PROBE_ERRORS
from smg.pipeline.backends.provider_http import bearer_key


class ProviderProber:
    def __init__(self, backend: HttpBackend, timeout_s: float) -> None:
        self.backend = backend
        self.timeout_s = timeout_s

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        assert worker.provider is not None
        name = worker.provider
        backend = self.backend
        vendor = backend.provider(name)
        out = vendor.models_request(bearer_key(backend.forward_headers({}, worker, "")))
        url = worker.url.rstrip("/") + out.path
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with backend.session.request(
                out.method, url, headers=out.headers, timeout=timeout
            ) as resp:
                status = resp.status
                raw = await read_capped(resp.content, CONTROL_BODY_BYTES, UNWATCHED)
        except PROBE_ERRORS as exc:
            return ProbeResult(ok=False, detail=f"{type(exc).__name__}: {exc}")
        if status in (401, 403):
            detail = f"{name} refused the worker's key: GET {out.path} answered {status}"
            return ProbeResult(ok=False, detail=detail)
        if status != 200:
            return ProbeResult(ok=False, detail=f"GET {out.path} answered {status}")
        ids = vendor.model_ids(status, bytes(raw))
        model_id = worker.model_id or (ids[0] if ids else None)
        if model_id is None:
            return ProbeResult(ok=False, detail=f"GET {out.path} named no model")
        adapters = tuple(i for i in ids if i != model_id)
        return ProbeResult(ok=True, model_id=model_id, adapters=adapters)
