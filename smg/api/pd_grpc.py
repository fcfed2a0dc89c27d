"""Prefill/decode disaggregation over gRPC: the token pipeline's answer comes from a PD pair.

The request is templated and tokenized once; the pair is picked as in HTTP PD (`smg.pipeline.pd`)
and the decode engine's stream goes through the same output shaper as any gRPC answer. How the
KV cache gets from prefill to decode depends on the decode engine's runtime:

* SGLang: the same `GenerateRequest` goes to both at once, with `disaggregated_params` naming the
  prefill's bootstrap host and port and a random room (the proto's field is int32, so 31 bits).
  The prefill leg is drained by a child task. A prefill added without a bootstrap port
  (`--prefill URL`) is asked once for its `GetServerInfo`, whose server args carry SGLang's
  `disaggregation_bootstrap_port`; the answer is cached per URL and forgotten when a prefill leg
  on that URL fails (a restarted engine may listen elsewhere).
* vLLM: the prefill runs first, non-streaming, with max_tokens 1 and `kv_transfer_params_json`
  asking for a remote decode (the NIXL proxy's convention); its `GenerateComplete` answers the
  connector's params, which the decode request then carries.

A failing leg cancels the other one and the client gets 502 `pd_prefill_failed` /
`pd_decode_failed` (an error event if its stream has started), except that a prefill failing
before the client was sent anything (a non-streamed request, or a stream not yet started) is
retried once on another prefill, with a new decode leg (HTTP PD does not retry).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from google.protobuf import json_format

from smg import errors
from smg.api.pd_routes import LegFailed, PdRoutes, fail_client, leg_done
from smg.api.relay import ROUTED_WORKER_HEADER
from smg.core.snapshots import WorkerSnapshot
from smg.pipeline import pd
from smg.pipeline.backends.grpc import EngineClient, EngineError
from smg.pipeline.backends.grpc_contract import SGLANG
from smg.pipeline.backends.grpc_pool import EnginePool, EngineStream, start_stream
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineRequest, Finished
from smg.pipeline.output import OutputShaper
from smg.pipeline.policies.base import RouteRequest

if TYPE_CHECKING:
    from smg.api.pipeline_routes import PipelineRoutes, Prepared

log = structlog.get_logger("smg.pd")

ROOM_BITS_GRPC = 31  # SGLang's DisaggregatedParams.bootstrap_room is an int32
# What a vLLM prefill is asked for: keep the KV blocks for a remote decode (NIXL's fields)
VLLM_PREFILL_KV = json.dumps(
    {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    },
    separators=(",", ":"),
)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def sglang_legs(
    req: EngineRequest, prefill: WorkerSnapshot, room: int, port: int | None = None
) -> EngineRequest:
    """The one request both SGLang legs get: the prefill's bootstrap rendezvous added (`port`:
    the discovered one, when the prefill was added without one)."""
    port = prefill.bootstrap_port or port or 0
    return dataclasses.replace(req, bootstrap=(pd.bootstrap_host(prefill.url), port, room))


async def server_args(client: EngineClient, timeout_s: float) -> dict[str, Any]:
    """An SGLang engine's `GetServerInfo().server_args` as a dict.

    EngineClient has no public server-info call yet (its module belongs to the gRPC adapter),
    so this goes through its probe stub; move it there when one exists.
    """
    reply = await client._unary(
        client._probe.GetServerInfo,
        client._pb.GetServerInfoRequest(),
        timeout_s,
    )
    return json_format.MessageToDict(reply.server_args)


def vllm_prefill(req: EngineRequest) -> EngineRequest:
    """The vLLM prefill leg: one token, one choice, not streamed, KV kept for a remote decode.

    `ignore_eos`: NIXL hands the KV off only when the prefill finishes length-capped, so an EOS
    first token must not stop it (as the Rust gateway's `sanitize_sampling_for_prefill`)."""
    sampling = dataclasses.replace(
        req.sampling,
        max_tokens=1,
        min_tokens=0,
        n=1,
        logprobs=None,
        stop=(),
        stop_token_ids=(),
        ignore_eos=True,
    )
    return dataclasses.replace(
        req, sampling=sampling, stream=False, kv_transfer_params_json=VLLM_PREFILL_KV
    )


def vllm_decode(req: EngineRequest, kv_params: str) -> EngineRequest:
    return dataclasses.replace(req, kv_transfer_params_json=kv_params)


class _RetryPrefill(Exception):
    """The prefill at `url` failed before the client was sent anything: try another pair."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


def _another_prefill(candidates: tuple[WorkerSnapshot, ...], failed: str, now: float) -> bool:
    return any(
        w.worker_type == pd.PREFILL and w.url != failed and w.routable(now) for w in candidates
    )


class GrpcPd:
    def __init__(
        self,
        *,
        routes: PdRoutes,
        engines: EnginePool,
        timeout_s: float,
        prefill_retries: int = 1,
    ) -> None:
        self.routes = routes
        self.engines = engines
        self.timeout_s = timeout_s
        self.prefill_retries = prefill_retries  # other prefills tried after one fails (0: none)
        self._bootstrap_ports: dict[str, int] = {}  # discovered, by prefill URL

    async def run(
        self,
        pipeline: PipelineRoutes,
        request: web.Request,
        prepared: Prepared,
        route: RouteRequest,
        engine_request: EngineRequest,
    ) -> web.StreamResponse:
        """Serve through a PD pair; a prefill that fails before the client got anything is
        left out and the request tried again on another pair, `prefill_retries` times at most
        (each retry under a fresh request id, so the aborts of the old legs cannot hit it). One
        deadline covers every attempt and leg (a leg gets what is left of it)."""
        failed: set[str] = set()
        req = engine_request
        deadline = self.routes.clock.now() + self.timeout_s
        while True:
            candidates = tuple(
                w for w in pipeline.runner.candidates(prepared.model) if w.url not in failed
            )
            may_retry = len(failed) < self.prefill_retries
            try:
                return await self._attempt(
                    pipeline, request, prepared, route, req, candidates, may_retry, deadline
                )
            except _RetryPrefill as retry:
                failed.add(retry.url)
                log.warning("pd_prefill_retry", failed=retry.url, attempt=len(failed))
                req = dataclasses.replace(
                    engine_request, request_id=f"{engine_request.request_id}-r{len(failed)}"
                )

    async def _attempt(
        self,
        pipeline: PipelineRoutes,
        request: web.Request,
        prepared: Prepared,
        route: RouteRequest,
        engine_request: EngineRequest,
        candidates: tuple[WorkerSnapshot, ...],
        may_retry: bool,
        deadline: float,
    ) -> web.StreamResponse:
        r = self.routes
        if r.clock.now() >= deadline:
            raise errors.upstream_timeout(self.timeout_s)
        pair = pd.select_pair(
            candidates,
            route,
            prefill_policy=r.prefill_policy,
            decode_policy=r.decode_policy,
            now=r.clock.now(),
        )
        for w in (pair.prefill, pair.decode):
            r.metrics.selected(w, prepared.model)
        headers = {
            "X-Request-Id": request["request_id"],  # the client's, echoed
            ROUTED_WORKER_HEADER: pair.decode.worker_id,
            "X-SMG-Prefill-Worker-Id": pair.prefill.worker_id,
        }
        shaper = OutputShaper(prepared.spec, prepared.tokenizer.decode_sync)
        resp: web.StreamResponse | None = None
        out: web.StreamResponse | None = None
        failure: LegFailed | None = None
        outcome: list[bool | None] = [None]  # the decode leg's; None: unknown

        def finish(ok: bool | None) -> None:
            outcome[0] = ok

        pair.decode.counter.active += 1  # the prefill leg counts itself
        try:
            async with asyncio.TaskGroup() as tg:
                decode_client = self._client(pd.DECODE, pair.decode)
                if decode_client.runtime == SGLANG:
                    room = r.rng.getrandbits(ROOM_BITS_GRPC)
                    port = await self._bootstrap_port(pair.prefill)
                    decode_req = sglang_legs(engine_request, pair.prefill, room, port)
                    tg.create_task(self._prefill(pair.prefill, decode_req, False, deadline))
                else:
                    kv = await self._prefill(
                        pair.prefill, vllm_prefill(engine_request), True, deadline
                    )
                    assert kv is not None
                    decode_req = vllm_decode(engine_request, kv)
                engine = await self._start(pd.DECODE, pair.decode, decode_req, deadline)
                if engine_request.stream:
                    resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, **headers})
                    await pipeline.stream(request, resp, engine, shaper, finish)
                    out = resp
                else:
                    try:
                        out = await pipeline.whole(engine, shaper, headers, finish)
                    except errors.ApiError as exc:
                        raise LegFailed(pd.DECODE, f"{pair.decode.url}: {shaper.error}") from exc
        except* LegFailed as group:
            failure = next(e for e in group.exceptions if isinstance(e, LegFailed))
            if failure.role == pd.DECODE:
                outcome[0] = False
        finally:
            leg_done(pair.decode, outcome[0])
        if failure is None:
            assert out is not None
            return out
        log.warning(
            "pd_leg_failed",
            role=failure.role,
            detail=failure.detail,
            grpc=True,
            request_id=request["request_id"],
            engine_id=engine_request.request_id,
        )
        if (
            may_retry
            and failure.role == pd.PREFILL
            and (resp is None or not resp.prepared)
            and _another_prefill(candidates, pair.prefill.url, r.clock.now())
        ):
            raise _RetryPrefill(pair.prefill.url)
        return await fail_client(resp, failure.api_error(), ended=bool(outcome[0]))

    async def _bootstrap_port(self, prefill: WorkerSnapshot) -> int:
        """The prefill's KV bootstrap port: configured, cached, or asked of the engine."""
        if prefill.bootstrap_port:
            return prefill.bootstrap_port
        known = self._bootstrap_ports.get(prefill.url)
        if known is not None:
            return known
        client = self._client(pd.PREFILL, prefill)
        try:
            args = await server_args(client, min(self.timeout_s, client.rpc_timeout_s))
        except (UpstreamError, EngineError) as exc:
            raise LegFailed(pd.PREFILL, f"{prefill.url}: GetServerInfo failed: {exc}") from exc
        port = pd.bootstrap_port_from(args)
        if port is None:
            hint = "it reports no disaggregation_bootstrap_port: give one with --prefill URL PORT"
            raise LegFailed(pd.PREFILL, f"{prefill.url}: {hint}", public=hint)
        log.info("pd_bootstrap_port_discovered", url=prefill.url, port=port)
        self._bootstrap_ports[prefill.url] = port
        return port

    def _client(self, role: str, worker: WorkerSnapshot) -> EngineClient:
        try:
            return self.engines.client(worker.url)
        except UpstreamError as exc:
            raise LegFailed(role, exc.detail) from exc

    async def _start(
        self, role: str, worker: WorkerSnapshot, req: EngineRequest, deadline: float
    ) -> EngineStream:
        try:
            client = self.engines.client(worker.url)
            left = max(0.001, deadline - self.routes.clock.now())
            return await start_stream(client, req, left)
        except UpstreamError as exc:
            raise LegFailed(role, exc.detail) from exc
        except errors.ApiError as exc:
            raise LegFailed(role, f"{worker.url}: {exc.message}") from exc

    async def _prefill(
        self, worker: WorkerSnapshot, req: EngineRequest, need_kv: bool, deadline: float
    ) -> str | None:
        """Run the prefill leg to its end (its tokens are not the client's); with `need_kv`,
        return the KV-transfer params of its final message."""
        worker.counter.active += 1
        success: bool | None = None
        try:
            engine = await self._start(pd.PREFILL, worker, req, deadline)
            kv: str | None = None
            try:
                async for ev in engine.events():
                    if isinstance(ev, Finished):
                        if ev.error is not None:
                            raise LegFailed(pd.PREFILL, f"{worker.url}: {ev.error}")
                        kv = ev.kv_transfer_params_json or kv
            finally:
                await engine.aclose()
            if need_kv and kv is None:
                raise LegFailed(pd.PREFILL, f"{worker.url} answered no kv_transfer_params")
            success = True
            return kv
        except LegFailed:
            success = False
            self._bootstrap_ports.pop(worker.url, None)  # re-ask a restarted engine
            raise
        finally:
            leg_done(worker, success)  # cancelled (the decode leg failed): outcome unknown
