"""Prefill/decode disaggregation over gRPC: a token-mode answer from a PD pair.

The request is templated and tokenized once (prepare); the pair is picked as in HTTP PD
(`Pairing`), and the decode engine's events go through the surface's renderer like any engine
answer (render.py), so chat, completions and SGLang's /generate all run through PD. How the KV
cache gets from prefill to decode depends on the decode engine's runtime:

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
`pd_decode_failed` (an error event if its stream has started; legs.py), except that a prefill
failing before the client was sent anything (a non-streamed request, or a stream not yet
started) is retried on another prefill, with a new decode leg, `prefill_retries` times (HTTP PD
does not retry). One deadline covers every attempt and leg.

One attempt, step by step (`_attempt`): pick the pair (`Pairing.pick`); open the legs
(`_open_legs`: the prefill's rendezvous or KV params, then the decode stream); answer the client
from the decode stream (`_Answer.send`); on a failed leg, retry or tell the client (`_failed`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random

import structlog
from aiohttp import web

from smg import errors, tracing
from smg.clock import Clock
from smg.core.dp import rank_of
from smg.core.snapshots import WorkerSnapshot
from smg.flow import render
from smg.flow.answer import Answer
from smg.flow.legs import LegFailed, fail_client
from smg.flow.prepare import Prepared
from smg.flow.render import (
    PREFILL_WORKER_HEADER,
    ROUTED_WORKER_HEADER,
    Renderer,
    RenderFactory,
)
from smg.flow.request import Request
from smg.flow.runner import Pairing, Runner, settle
from smg.metrics.router import CURRENT, PdLegs
from smg.pipeline import pd
from smg.pipeline.backends.grpc import EngineClient, EngineError
from smg.pipeline.backends.grpc_contract import SGLANG
from smg.pipeline.backends.grpc_pool import EnginePool, EngineStream, start_stream
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineRequest, Finished
from smg.pipeline.policies.base import RouteRequest

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


def sglang_legs(
    req: EngineRequest, prefill: WorkerSnapshot, room: int, port: int | None = None
) -> EngineRequest:
    """The one request both SGLang legs get: the prefill's bootstrap rendezvous added (`port`:
    the discovered one, when the prefill was added without one)."""
    port = prefill.bootstrap_port or port or 0
    return dataclasses.replace(req, bootstrap=(pd.bootstrap_host(prefill.url), port, room))


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


class _Answer:
    """The client's side of one attempt: the decode leg's events, rendered; `outcome` is the
    decode engine's (None: unknown, the client left or the leg was cancelled)."""

    __slots__ = ("client", "decode", "headers", "out", "outcome", "resp")

    def __init__(self, client: web.Request, req: Request, pair: pd.PdPair) -> None:
        self.client = client
        self.decode = pair.decode
        self.headers = {
            "X-Request-Id": req.client_id,  # the client's, echoed
            ROUTED_WORKER_HEADER: pair.decode.worker_id,
            PREFILL_WORKER_HEADER: pair.prefill.worker_id,
        }
        self.outcome: bool | None = None
        self.resp: web.StreamResponse | None = None  # a stream, once started
        self.out: Answer | None = None  # the answer, once complete

    @property
    def started(self) -> bool:
        """The client has been sent something (no retry after that)."""
        return self.resp is not None and self.resp.prepared

    def finish(self, ok: bool | None) -> None:
        self.outcome = ok

    async def send(
        self, engine: EngineStream, renderer: Renderer, stream: bool, engine_id: str
    ) -> None:
        if stream:
            self.resp = render.sse_response(renderer, self.headers)
            with tracing.stage("stream"):
                await render.stream(
                    self.client, self.resp, engine, renderer, engine_id, self.finish
                )
            self.out = self.resp
            return
        try:
            self.out = await render.whole(engine, renderer, self.headers, engine_id, self.finish)
        except errors.ApiError as exc:
            raise LegFailed(pd.DECODE, f"{self.decode.url}: {renderer.error}") from exc


class GrpcPd:
    def __init__(
        self,
        *,
        runner: Runner,
        pairing: Pairing,
        engines: EnginePool,
        rng: random.Random,
        timeout_s: float,
        prefill_retries: int = 1,
    ) -> None:
        self.runner = runner
        self.pairing = pairing
        self.engines = engines
        self.rng = rng
        self.clock: Clock = pairing.clock
        self.timeout_s = timeout_s
        self.prefill_retries = prefill_retries  # other prefills tried after one fails (0: none)
        self._bootstrap_ports: dict[str, int] = {}  # discovered, by prefill URL

    async def serve(
        self,
        client: web.Request,
        req: Request,
        prepared: Prepared,
        route: RouteRequest,
        render_with: RenderFactory,
    ) -> Answer:
        """Serve through a PD pair; a prefill that fails before the client got anything is
        left out and the request tried again on another pair, `prefill_retries` times at most
        (each retry under a fresh request id, so the aborts of the old legs cannot hit it). One
        deadline covers every attempt and leg (a leg gets what is left of it)."""
        failed: set[str] = set()
        first = prepared.engine_request(req.stream)
        engine_request = first
        deadline = self.clock.now() + self.timeout_s
        while True:
            candidates = tuple(w for w in self.runner.candidates(req.model) if w.url not in failed)
            may_retry = len(failed) < self.prefill_retries
            renderer = render_with(prepared.spec, prepared.tokenizer.decode_sync, self.clock.now)
            try:
                return await self._attempt(
                    client, req, route, engine_request, renderer, candidates, may_retry, deadline
                )
            except _RetryPrefill as retry:
                failed.add(retry.url)
                log.warning("pd_prefill_retry", failed=retry.url, attempt=len(failed))
                engine_request = dataclasses.replace(
                    first, request_id=f"{first.request_id}-r{len(failed)}"
                )

    async def _attempt(
        self,
        client: web.Request,
        req: Request,
        route: RouteRequest,
        engine_request: EngineRequest,
        renderer: Renderer,
        candidates: tuple[WorkerSnapshot, ...],
        may_retry: bool,
        deadline: float,
    ) -> Answer:
        if self.clock.now() >= deadline:
            raise errors.upstream_timeout(self.timeout_s)
        pair = self.pairing.pick(candidates, route)
        answer = _Answer(client, req, pair)
        failure: LegFailed | None = None
        pair.decode.counter.active += 1  # the prefill leg counts itself
        try:
            async with asyncio.TaskGroup() as tg:
                engine = await self._open_legs(tg, pair, engine_request, deadline)
                await answer.send(engine, renderer, req.stream, engine_request.request_id)
        except* LegFailed as group:
            failure = next(e for e in group.exceptions if isinstance(e, LegFailed))
            if failure.role == pd.DECODE:
                answer.outcome = False
        finally:
            settle(pair.decode, answer.outcome)
        if failure is None:
            assert answer.out is not None
            return answer.out
        return await self._failed(
            failure, answer, req, pair, candidates, may_retry, engine_request.request_id
        )

    async def _open_legs(
        self,
        tg: asyncio.TaskGroup,
        pair: pd.PdPair,
        engine_request: EngineRequest,
        deadline: float,
    ) -> EngineStream:
        """Start the prefill leg (SGLang: alongside, in `tg`; vLLM: to its end, for its KV
        params) and then the decode leg's stream."""
        runtime = self._client(pd.DECODE, pair.decode).runtime
        probe = CURRENT.get()
        legs = None if probe is None else PdLegs(runtime)
        if probe is not None:
            probe.pd = legs
        if runtime == SGLANG:
            room = self.rng.getrandbits(ROOM_BITS_GRPC)
            port = await self._bootstrap_port(pair.prefill, legs)
            decode_req = sglang_legs(engine_request, pair.prefill, room, port)
            tg.create_task(self._prefill(pair.prefill, decode_req, False, deadline))
            return await self._start(pd.DECODE, pair.decode, decode_req, deadline)
        now = self.clock.now
        began = now()
        kv = await self._prefill(pair.prefill, vllm_prefill(engine_request), True, deadline, legs)
        assert kv is not None
        ended = now()
        stream = await self._start(
            pd.DECODE, pair.decode, vllm_decode(engine_request, kv), deadline
        )
        if legs is not None:  # the decode is established: the Rust gateway's success-only series
            legs.kv_mode, legs.prefill_s, legs.kv_s = "nixl", ended - began, now() - ended
        return stream

    async def _failed(
        self,
        failure: LegFailed,
        answer: _Answer,
        req: Request,
        pair: pd.PdPair,
        candidates: tuple[WorkerSnapshot, ...],
        may_retry: bool,
        engine_id: str,
    ) -> web.StreamResponse:
        """A leg failed: retry on another prefill if nothing was sent yet, else tell the client."""
        log.warning(
            "pd_leg_failed",
            role=failure.role,
            detail=failure.detail,
            grpc=True,
            request_id=req.client_id,
            engine_id=engine_id,
        )
        if (
            may_retry
            and failure.role == pd.PREFILL
            and not answer.started
            and _another_prefill(candidates, pair.prefill.url, self.clock.now())
        ):
            raise _RetryPrefill(pair.prefill.url)
        return await fail_client(answer.resp, failure.api_error(), ended=bool(answer.outcome))

    async def _bootstrap_port(self, prefill: WorkerSnapshot, legs: PdLegs | None = None) -> int:
        """The prefill's KV bootstrap port: configured, cached, or asked of the engine."""
        if prefill.bootstrap_port:
            return prefill.bootstrap_port
        known = self._bootstrap_ports.get(prefill.url)
        if known is not None:
            return known
        client = self._client(pd.PREFILL, prefill)
        try:
            args = await client.server_args(min(self.timeout_s, client.rpc_timeout_s))
        except (UpstreamError, EngineError) as exc:
            if legs is not None:
                legs.failure = "bootstrap"
            raise LegFailed(pd.PREFILL, f"{prefill.url}: GetServerInfo failed: {exc}") from exc
        port = pd.bootstrap_port_from(args)
        if port is None:
            if legs is not None:
                legs.failure = "bootstrap"
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
        rank = rank_of(worker.url)  # a rank worker's leg names its rank (`--dp-aware`)
        if rank is not None:
            req = dataclasses.replace(req, dp_rank=rank)
        try:
            client = self.engines.client(worker.url)
            left = max(0.001, deadline - self.clock.now())
            with tracing.stage(f"dispatch_{role}", "server.address", worker.url):
                return await start_stream(client, req, left)
        except UpstreamError as exc:
            raise LegFailed(role, exc.detail) from exc
        except errors.ApiError as exc:
            raise LegFailed(role, f"{worker.url}: {exc.message}") from exc

    async def _prefill(
        self,
        worker: WorkerSnapshot,
        req: EngineRequest,
        need_kv: bool,
        deadline: float,
        legs: PdLegs | None = None,
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
                if legs is not None:
                    legs.failure = "kv_transfer"
                raise LegFailed(pd.PREFILL, f"{worker.url} answered no kv_transfer_params")
            success = True
            return kv
        except LegFailed:
            success = False
            self._bootstrap_ports.pop(worker.url, None)  # re-ask a restarted engine
            raise
        finally:
            settle(worker, success)  # cancelled (the decode leg failed): outcome unknown
