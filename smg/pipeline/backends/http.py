"""HTTP transport adapter: open one upstream attempt to an OpenAI-compatible worker.

It only moves bytes: the runner decides which worker, whether to retry and what to count.
Errors are classified into the two kinds the runner treats differently: the worker could not be
reached (connection refused/reset before an answer) and the worker did not answer in time.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from smg.actors.messages import ProbeResult
from smg.actors.snapshots import WorkerSnapshot


class UpstreamError(Exception):
    """An attempt failed before the worker answered with a status line."""

    def __init__(self, kind: str, detail: str, timeout_s: float = 0.0) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind  # "connect" | "timeout"
        self.detail = detail
        self.timeout_s = timeout_s


# Request headers a proxy must not forward (hop-by-hop, or recomputed by the client library).
_DROP_REQUEST = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "te",
        "upgrade",
        "authorization",
        "accept-encoding",
    }
)
# Response headers not relayed to the client.
DROP_RESPONSE = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "server", "date"}
)


def forward_headers(
    incoming: Mapping[str, str], worker: WorkerSnapshot, request_id: str
) -> dict[str, str]:
    out = {k: v for k, v in incoming.items() if k.lower() not in _DROP_REQUEST}
    out["Content-Type"] = "application/json"
    out["X-Request-Id"] = request_id
    if worker.api_key:
        out["Authorization"] = f"Bearer {worker.api_key}"
    return out


class HttpBackend:
    def __init__(self, session: aiohttp.ClientSession, request_timeout_s: float) -> None:
        self.session = session
        self.timeout_s = request_timeout_s
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, connect=None)
        self._urls: dict[tuple[str, str], URL] = {}

    async def open(
        self,
        worker: WorkerSnapshot,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
    ) -> aiohttp.ClientResponse:
        """Send the request; return once the status line and headers are in."""
        key = (worker.url, path)
        url = self._urls.get(key)
        if url is None:  # parsing a URL costs more than the rest of our per-request work
            url = self._urls[key] = URL(worker.url + path)
        try:
            return await self.session.post(url, data=body, headers=headers, timeout=self._timeout)
        except TimeoutError as exc:
            detail = f"{worker.url}: no answer in {self.timeout_s:g} s"
            raise UpstreamError("timeout", detail, self.timeout_s) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError("connect", f"{worker.url}: {exc}") from exc
        except OSError as exc:
            raise UpstreamError("connect", f"{worker.url}: {exc}") from exc

    async def get_json(self, url: str, timeout_s: float) -> tuple[int, object]:
        """A small control-plane GET (health, model discovery, loads)."""
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            status = resp.status
            try:
                data: object = await resp.json(content_type=None)
            except ValueError:
                data = None
            return status, data


class HttpProber:
    """Health check of an HTTP worker: GET the health endpoint; learn the model once from
    /v1/models (the way vLLM and SGLang servers announce what they serve)."""

    def __init__(self, backend: HttpBackend, endpoint: str, timeout_s: float) -> None:
        self.backend = backend
        self.endpoint = endpoint if endpoint.startswith("/") else "/" + endpoint
        self.timeout_s = timeout_s

    async def __call__(self, worker: WorkerSnapshot) -> ProbeResult:
        try:
            status, _ = await self.backend.get_json(worker.url + self.endpoint, self.timeout_s)
            if status != 200:
                return ProbeResult(ok=False, detail=f"{self.endpoint} answered {status}")
            model_id = worker.model_id
            if model_id is None:
                status, data = await self.backend.get_json(
                    worker.url + "/v1/models", self.timeout_s
                )
                model_id = _first_model(data) if status == 200 else None
                if model_id is None:
                    return ProbeResult(ok=False, detail="/v1/models named no model")
            return ProbeResult(ok=True, model_id=model_id)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return ProbeResult(ok=False, detail=f"{type(exc).__name__}: {exc}")


def _first_model(data: object) -> str | None:
    if isinstance(data, dict):
        items = data.get("data")
        if isinstance(items, list) and items and isinstance(items[0], dict):
            mid = items[0].get("id")
            return mid if isinstance(mid, str) else None
    return None
