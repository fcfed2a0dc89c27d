"""HTTP transport adapter: open one upstream attempt to an OpenAI-compatible worker.

It only moves bytes: the runner decides which worker, whether to retry and what to count.
Errors are classified into the two kinds the runner treats differently: the worker could not be
reached (connection refused/reset/timed out before an answer: safe to retry elsewhere) and the
worker did not answer within the request's deadline. `UpstreamError.detail` names the worker and
the cause: it is for the log, never for the client.

What the gateway sends a worker: the client's headers minus hop-by-hop ones and anything that
could carry the client's credentials or ids; the worker's own Bearer credential (its `api_key`,
else `--worker-api-key`; never the clients' key); the engine request id the gateway made.
What it accepts back: a non-streamed body up to `max_response_bytes` (`ResponseTooLarge` past
it), and streams that never stay silent longer than the idle limit (`IdleTimeout`, cut by the
`IdleSweeper`, no timer per chunk).

The data path's POSTs go through the lean HTTP/1.1 client (`h1_pool.H1Client`: httptools, a
keep-alive pool per worker, aiohttp-shaped answers and errors); control-plane calls (health,
models, loads, scrapes) stay on the aiohttp session.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Coroutine, Mapping
from typing import Any, cast

import aiohttp
import orjson
import structlog

from smg import errors, tracing
from smg.core import dp
from smg.core.idle import IdleSweeper, Watch
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline.backends.h1_body import H1Response
from smg.pipeline.backends.h1_client import request_bytes
from smg.pipeline.backends.h1_pool import H1Client, Target, target_of
from smg.pipeline.backends.provider_http import (
    TranslatedStream,
    WholeContent,
    bearer_key,
    outgoing_request,
)
from smg.pipeline.providers import provider
from smg.pipeline.providers.base import Provider, ProviderStreamError
from smg.pipeline.providers.stream_usage import UsageShaped

log = structlog.get_logger("smg.http")

CONTROL_BODY_BYTES = 4 * 1024 * 1024  # health, model list, loads: small JSON documents


class UpstreamError(Exception):
    """An attempt failed before the worker answered with a status line."""

    def __init__(self, kind: str, detail: str, timeout_s: float = 0.0) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind  # "connect" | "timeout" | "busy" (an engine out of room: not a failure)
        self.detail = detail  # names the worker: for logs only
        self.timeout_s = timeout_s


class ResponseTooLarge(Exception):
    """A worker's non-streamed answer passed `max_response_bytes`."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer exceeded {limit} bytes")
        self.limit = limit


class IdleTimeout(TimeoutError):
    """A worker's stream stayed silent past the idle limit (set into its reader by the sweeper)."""


# Request headers a proxy must not forward: hop-by-hop ones, ones the client library recomputes,
# the client's credentials (never the worker's business) and its request ids (the worker gets
# the gateway's own id instead).
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
        "x-api-key",
        "api-key",
        "cookie",
        "accept-encoding",
        "x-request-id",
        "x-correlation-id",
        "x-trace-id",
        "request-id",
        # set by the gateway (a client's own, in any case, would repeat it: the lean edge keeps
        # header names as sent; aiohttp's parser made the common ones canonical)
        "content-type",
    }
)
# Response headers not relayed to the client (the worker's own request id included: the client
# gets its own back).
DROP_RESPONSE = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "server",
        "date",
        "x-request-id",
    }
)
UNWATCHED = Watch(lambda: None)  # bumped by readers when there is no idle limit; never swept


class HttpBackend:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        request_timeout_s: float,
        *,
        worker_api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        max_response_bytes: int = 32 * 1024 * 1024,
        idle: IdleSweeper | None = None,
        provider_byok: bool = False,
        gateway_keys: frozenset[str] = frozenset(),
        client: H1Client | None = None,
    ) -> None:
        """`session`: aiohttp, for the control plane (health, models, loads); `client`: the lean
        HTTP/1.1 pool the data path's POSTs go through (default: one with the default address
        policy and the session connector's TLS settings)."""
        self.provider_byok = provider_byok  # a provider worker gets the client's own key
        self._gateway_keys = gateway_keys  # ... unless it is one of the gateway's own
        self._providers: dict[str, Provider] = {}
        self.session = session
        self.timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self.idle = idle
        self._default_auth = f"Bearer {worker_api_key}" if worker_api_key else None
        self._timeout = self._client_timeout(request_timeout_s)
        self.client = client or H1Client(tls=_session_tls(session))
        self._targets: dict[str, Target] = {}

    def close(self) -> None:
        """Close the data path's idle connections (the session is its owner's to close)."""
        self.client.close()

    def _client_timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=total_s, connect=min(self.connect_timeout_s, total_s))

    # --- what goes out ---------------------------------------------------------------------------
    def authorization(self, worker: WorkerSnapshot) -> str | None:
        """The worker's Bearer credential: its own api_key, else `--worker-api-key`."""
        key = worker.api_key
        return f"Bearer {key}" if key else self._default_auth

    def forward_headers(
        self, incoming: Mapping[str, str], worker: WorkerSnapshot, engine_id: str
    ) -> dict[str, str]:
        if worker.provider is not None:  # the vendor gets its credential, nothing of the client
            return self._provider_auth(incoming, worker)
        out = {}
        for k, v in incoming.items():  # a loop, not a comprehension: no frame a request
            if k.lower() not in _DROP_REQUEST:
                out[k] = v
        out["Content-Type"] = "application/json"
        out["X-Request-Id"] = engine_id
        auth = self.authorization(worker)
        if auth is not None:
            out["Authorization"] = auth
        return out

    def _provider_auth(self, incoming: Mapping[str, str], worker: WorkerSnapshot) -> dict[str, str]:
        """A provider worker's key as a Bearer header (`open` hands it to the provider): the
        client's own with bring-your-own-key (its `Authorization` Bearer, else its `x-api-key`),
        else the worker's credential."""
        if self.provider_byok:
            client = bearer_key(incoming) or incoming.get("x-api-key") or incoming.get("X-Api-Key")
            if client and client not in self._gateway_keys:
                return {"Authorization": f"Bearer {client}"}
        auth = self.authorization(worker)
        return {"Authorization": auth} if auth is not None else {}

    def provider(self, name: str) -> Provider:
        found = self._providers.get(name)
        if found is None:
            found = self._providers[name] = provider(name, time.time)
        return found

    def open(
        self,
        worker: WorkerSnapshot,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> Coroutine[Any, Any, H1Response]:
        """Send the request; the answer once the status line and headers are in. `timeout_s`:
        what is left of the request's deadline (default: all of it); it bounds the body too. A
        provider worker's request goes out in its vendor's terms (`_open_provider`). Returns
        the coroutine to await (no frame of its own on the request's path)."""
        if timeout_s is None or timeout_s == self.timeout_s:
            timeout = self._timeout
        else:
            timeout = self._client_timeout(max(0.001, timeout_s))
        if worker.provider is not None:
            return self._open_provider(worker, path, body, headers, timeout)
        rank = dp.rank_of(worker.url)  # a rank worker (`--dp-aware`): the body names its rank
        if rank is not None:
            body = dp.with_rank(body, rank)
        return self._post(worker, path, body, headers, timeout)

    async def _open_provider(
        self,
        worker: WorkerSnapshot,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> H1Response:
        """The answer reads as OpenAI's: a 200 stream translated as it is read, anything else
        read whole here (size-capped, within the deadline) and translated at once. A whole
        answer that fails while it is read becomes the gateway's error answer (502/504: the
        worker's failure, as the relay would say it)."""
        assert worker.provider is not None
        vendor = self.provider(worker.provider)
        out, stream, usage = outgoing_request(vendor, path, body, bearer_key(headers))
        resp = await self._post(worker, out.path, out.body, out.headers, timeout)
        if stream and resp.status == 200 and resp.content_type == "text/event-stream":
            model = worker.model_id or ""
            translator = UsageShaped(vendor.chat_stream(model), usage)  # usage only when asked
            resp.content = cast(Any, TranslatedStream(resp.content, translator))
            return resp
        try:
            raw = await self.read_body(resp)
        except (TimeoutError, aiohttp.ClientError, ResponseTooLarge) as exc:
            resp.close()  # the rest of the body is unread: drop the connection
            log.warning(
                "provider_answer_failed",
                worker_url=worker.url,
                error=f"{type(exc).__name__}: {exc}",
            )
            err = self.answer_failure(exc)
            resp.status, data = err.status, err.to_json()
        else:
            resp.status, data = vendor.chat_answer(resp.status, bytes(raw))
        resp.content = cast(Any, WholeContent(data))
        return resp

    def answer_failure(self, exc: BaseException) -> errors.ApiError:
        """The client-facing error for an answer that failed after its headers: too large,
        idle, past the deadline, broken off, or a provider stream's error (its own status)."""
        if isinstance(exc, ProviderStreamError):  # the vendor's own status, code and message
            return errors.ApiError(exc.status, exc.code, exc.message)
        if isinstance(exc, ResponseTooLarge):
            return errors.upstream_too_large(exc.limit)
        if isinstance(exc, IdleTimeout) and self.idle is not None:
            return errors.upstream_idle(self.idle.idle_s)
        if isinstance(exc, TimeoutError):
            return errors.upstream_timeout(self.timeout_s)
        return errors.upstream_broken()

    async def _post(
        self,
        worker: WorkerSnapshot,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> H1Response:
        target = self._targets.get(worker.url)
        if target is None:
            target = self._targets[worker.url] = target_of(dp.engine_url(worker.url))
        if tracing.on:  # the current (dispatch) span's traceparent goes to the worker
            headers = dict(headers)
            tracing.inject_headers(headers)
        total = timeout.total or self.timeout_s
        try:
            data = request_bytes("POST", target.prefix + path, target.host, headers, body)
        except ValueError:
            raise errors.invalid_request(
                "a request header holds a line break", code="invalid_header"
            ) from None
        try:
            return await self.client.request(
                target, data, timeout.connect or self.connect_timeout_s, total
            )
        except aiohttp.ConnectionTimeoutError as exc:  # nothing was sent: another worker may do
            detail = f"{worker.url}: no connection in {timeout.connect:g} s"
            raise UpstreamError("connect", detail) from exc
        except TimeoutError as exc:
            raise UpstreamError(
                "timeout", f"{worker.url}: no answer in {total:g} s", total
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError("connect", f"{worker.url}: {exc!r}") from exc

    # --- what comes back -------------------------------------------------------------------------
    def watch(self, upstream: H1Response) -> Watch:
        """Put `upstream`'s body under the idle limit: the reader bumps `progress` per chunk and
        calls `unwatch` when done; a silent stream's next read raises `IdleTimeout`."""
        idle = self.idle
        if idle is None:
            return UNWATCHED
        content = upstream.content

        def cut() -> None:
            content.set_exception(IdleTimeout(f"no data from the worker in {idle.idle_s:g} s"))

        return idle.watch(cut)

    def unwatch(self, watch: Watch) -> None:
        if self.idle is not None and watch is not UNWATCHED:
            self.idle.release(watch)

    async def read_body(self, upstream: H1Response) -> bytearray:
        """The whole (non-streamed) answer, at most `max_response_bytes` (`ResponseTooLarge`
        past it: the caller drops the connection); idle-limited like a stream."""
        limit = self.max_response_bytes
        length = upstream.content_length
        if length is not None and length > limit:
            raise ResponseTooLarge(limit)
        watch = self.watch(upstream)
        try:
            return await read_capped(upstream.content, limit, watch)
        finally:
            self.unwatch(watch)

    async def get_json(
        self, worker: WorkerSnapshot, path: str, timeout_s: float
    ) -> tuple[int, object]:
        """A small control-plane GET (health, model discovery, loads) with the worker's
        credential; a body past `CONTROL_BODY_BYTES` raises `ResponseTooLarge`."""
        return await self.control(worker, "GET", path, timeout_s)

    async def control(
        self, worker: WorkerSnapshot, method: str, path: str, timeout_s: float
    ) -> tuple[int, object]:
        """A small control-plane call (GET health and loads, POST /flush_cache) with the worker's
        credential and no body: (status, the answer's JSON, or None when it is not JSON)."""
        auth = self.authorization(worker)
        headers = {"Authorization": auth} if auth is not None else None
        url = dp.engine_url(worker.url).rstrip("/") + path  # a rank worker's: its server's
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.request(method, url, headers=headers, timeout=timeout) as resp:
            status = resp.status
            length = resp.content_length
            if length is not None and length > CONTROL_BODY_BYTES:
                raise ResponseTooLarge(CONTROL_BODY_BYTES)
            raw = await read_capped(resp.content, CONTROL_BODY_BYTES, UNWATCHED)
            try:
                data: object = orjson.loads(raw) if raw else None
            except ValueError:
                data = None
            return status, data

    async def scrape(
        self, worker: WorkerSnapshot, path: str, timeout_s: float
    ) -> tuple[int, bytes]:
        """GET `path` of the worker's server with its credential: (status, body), the body at
        most CONTROL_BODY_BYTES (`ResponseTooLarge` past it; none read unless the status is
        200)."""
        auth = self.authorization(worker)
        headers = {"Authorization": auth} if auth is not None else None
        url = dp.engine_url(worker.url).rstrip("/") + path
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.get(url, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                return resp.status, b""
            return 200, bytes(await read_capped(resp.content, CONTROL_BODY_BYTES, UNWATCHED))


def _session_tls(session: aiohttp.ClientSession) -> ssl.SSLContext | None:
    """The TLS context of the session's connector (`TCPConnector(ssl=...)`), when it has one."""
    tls = getattr(getattr(session, "connector", None), "_ssl", None)
    return tls if isinstance(tls, ssl.SSLContext) else None


async def read_capped(content: Any, limit: int, watch: Watch) -> bytearray:
    """Read `content` (an aiohttp StreamReader) to its end; `ResponseTooLarge` past `limit`."""
    buf = bytearray()
    read = content.readany
    while True:
        chunk = await read()
        if not chunk:
            return buf
        buf += chunk
        if len(buf) > limit:
            raise ResponseTooLarge(limit)
        watch.progress += 1
