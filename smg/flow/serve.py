"""`Flow`: the one entry the API edges call.

`serve(req, render_with, client)` runs a request from its typed value to the client's answer:
the model must be known (404 before a permit is taken); token mode's checks that need no IO
run before admission too; then the request takes its admission permit and its place in the
in-flight table for as long as its answer runs, is prepared (token mode) or passed through, and
goes to the dispatcher of its plan:

    token mode?  PD mode?   dispatcher
    no           no         SingleWorker: one HTTP worker, the client's bytes relayed
    no           yes        HttpPd: a prefill/decode pair over HTTP, the decode's bytes relayed
    yes          no         SingleWorker: one engine (or an HTTP worker of a mixed fleet)
    yes          yes        GrpcPd: a prefill/decode pair of engines

Embeddings for a model with gRPC engines are answered by the gateway (embed.py: tokenize, one
Embed call per input, OpenAI's body) through the same runner.

Every dispatcher answers through the same render and relay paths and the same runner (retries,
deadline, breaker reports, metrics), whatever surface asked. A surface the gateway renders itself
(Responses) runs on every plan: an HTTP worker's chat answer, one worker's or a PD pair's decode
leg's, is read back and rendered instead of relayed (chat.chat_renderer decides, once for both).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from aiohttp import web

from smg import errors, tracing
from smg.core.snapshots import WorkerSnapshot
from smg.flow.admission import Admission
from smg.flow.answer import Answer, as_response
from smg.flow.embed import Embedder, wants_engines
from smg.flow.inflight import InFlight
from smg.flow.pd_grpc import GrpcPd
from smg.flow.pd_http import HttpPd
from smg.flow.prepare import Preparer, token_mode
from smg.flow.render import RenderFactory
from smg.flow.request import HTTP_ONLY_KINDS, Request
from smg.flow.runner import Runner
from smg.flow.single import SingleWorker
from smg.metrics.router import CURRENT, ENDPOINTS, RequestProbe, RouterMetrics
from smg.pipeline.backends.grpc_pool import is_grpc_url
from smg.pipeline.engine_ids import engine_body
from smg.pipeline.tokenizer import Tokenizer


class Flow:
    def __init__(
        self,
        *,
        runner: Runner,
        admission: Admission,
        inflight: InFlight,
        preparer: Preparer,
        single: SingleWorker,
        http_pd: HttpPd | None = None,
        grpc_pd: GrpcPd | None = None,
        igw: bool = False,
        aliases: Mapping[str, str] | None = None,
        metrics: RouterMetrics | None = None,
    ) -> None:
        self.runner = runner
        self.admission = admission
        self.inflight = inflight
        self.preparer = preparer
        self.single = single
        self.embedder = Embedder(single=single, preparer=preparer)
        self.http_pd = http_pd  # PD mode: every request goes to a prefill/decode pair
        self.grpc_pd = grpc_pd
        self.igw = igw  # IGW mode: a request without a model is never guessed a model
        self.aliases: Mapping[str, str] = aliases or {}  # --model-alias: alias -> canonical
        self.metrics = metrics  # the router's series: one observation set per answer

    async def serve(
        self, req: Request, render_with: RenderFactory, client: web.Request
    ) -> web.StreamResponse:
        """`answer` for aiohttp's server: a whole answer as a `web.Response`."""
        return as_response(await self.answer(req, render_with, client))

    async def answer(self, req: Request, render_with: RenderFactory, client: web.Request) -> Answer:
        """The client's answer to `req`: a stream (prepared and written against `client`) or
        a `Whole` the caller's server writes; `render_with` makes the surface's renderer for an
        engine's events. Client-facing failures raise `ApiError`. One coroutine for the whole
        run (a nested one costs a frame on every resume)."""
        metrics = self.metrics
        clock = self.runner.clock
        probe: RequestProbe | None = None
        if metrics is not None:
            probe = RequestProbe(clock.now, ENDPOINTS.get(client.path, "other"), req.stream)
            token = CURRENT.set(probe)
        status: int | None = 502  # an exception that is not an ApiError: counted as a failure
        try:
            req = self.canonical(req)
            candidates = self.runner.candidates(req.model)  # unknown model: 404 before a permit
            if req.kind in HTTP_ONLY_KINDS:
                http_only(req, candidates)
            tokens = token_mode(req, candidates)
            sampling = self.preparer.check(req) if tokens else None
            inputs = self.embedder.check(req) if wants_engines(req, candidates) else None
            if probe is not None:
                engines = tokens or inputs is not None
                label(probe, req.model, candidates, engines=engines, pd=self.pd)
            raw = engine_body(req.raw, req.body, req.engine_id)
            if tracing.on:
                tracing.annotate("gen_ai.request.model", req.model)
            with tracing.stage("queueing"):
                await self.admission.acquire()
            task = self.inflight.add(clock.now())
            resp: Answer
            try:
                if inputs is not None:
                    resp = await self.embedder.serve(client, req, raw, inputs, candidates)
                elif sampling is not None:
                    began = clock.now()
                    with tracing.stage("template_tokenize"):
                        prepared = await self.preparer.prepare(req, sampling, candidates)
                    if probe is not None:
                        probe.prepare_s = clock.now() - began
                    route = self.preparer.route(req, prepared)
                    if self.grpc_pd is not None:
                        resp = await self.grpc_pd.serve(client, req, prepared, route, render_with)
                    else:
                        resp = await self.single.serve(
                            client, req, raw, route, prepared, render_with
                        )
                else:
                    route = self.preparer.route(req, None)
                    if self.http_pd is not None:
                        resp = await self.http_pd.serve(client, req, route, candidates, render_with)
                    else:
                        resp = await self.single.serve(client, req, raw, route, None, render_with)
            finally:
                self.inflight.remove(task)
                self.admission.release()
            status = None
            return resp
        except errors.ApiError as err:
            status = err.status
            raise
        finally:
            if probe is not None:
                assert metrics is not None
                CURRENT.reset(token)
                metrics.done(probe, clock.now(), status)

    @property
    def pd(self) -> bool:
        return self.http_pd is not None or self.grpc_pd is not None

    def canonical(self, req: Request) -> Request:
        """`req` as its canonical model's request when it names an alias (`--model-alias`) no
        worker serves under that name: the model the workers see and the answer names (the Rust
        gateway rewrites the body the same way)."""
        if not self.aliases:
            return req
        asked = req.body.get("model")
        if not isinstance(asked, str):
            return req
        canonical = self.model_of(asked)
        if canonical == asked:
            return req
        body = {**req.body, "model": canonical}
        return req._replace(model=canonical, body=body, raw=orjson.dumps(body))

    def model_of(self, model: str) -> str:
        """The canonical model for `model`: itself unless it is an alias of an unserved name."""
        canonical = self.aliases.get(model)
        if canonical is None or model in self.runner.registry.value.by_model:
            return model
        return canonical

    # --- what the native edges ask besides answers -----------------------------------------------
    def resolve_model(self, model: object, path: str | None = None) -> str:
        """The model a native request names (404 if unknown), or the only one served (outside
        IGW mode: there, 400 `missing_model`, as the Rust gateway)."""
        if isinstance(model, str) and model.strip():
            model = self.model_of(model)
            self.runner.candidates(model)
            return model
        if self.igw:
            raise errors.missing_model(path)
        served = list(self.runner.registry.value.by_model)
        if len(served) == 1:
            return served[0]
        if not served:
            raise errors.no_healthy_worker()
        raise errors.missing_field("model")

    def tokenizer(self, model: str) -> Tokenizer:
        """The gateway's tokenizer for `model` (models served by gRPC engines have one)."""
        tok = self.preparer.tokenizers.value.get(model)
        if tok is None:
            raise errors.invalid_request(
                f"Model '{model}' has no tokenizer in the gateway (HTTP workers only?)",
                param="model",
                code="tokenizer_not_available",
            )
        return tok


def label(
    probe: RequestProbe,
    model: str,
    candidates: tuple[WorkerSnapshot, ...],
    *,
    engines: bool,
    pd: bool,
) -> None:
    """The request's router labels, once its model is known to be served (`model` is then a
    registry key, never the client's text as such)."""
    probe.model = model or "default"
    if engines:
        probe.router_type = probe.connection_mode = "grpc"
    elif candidates and candidates[0].provider is not None:
        probe.router_type, probe.backend_type = "openai", "external"
        return
    probe.backend_type = "pd" if pd else "regular"


def http_only(req: Request, candidates: tuple[WorkerSnapshot, ...]) -> None:
    """Rerank and classify are passed through to HTTP workers: a model with gRPC engines among
    its workers is refused (501) rather than sent to an engine as HTTP (a failure that would
    count against the engine's breaker)."""
    if any(is_grpc_url(w.url) for w in candidates):
        raise errors.ApiError(
            501,
            "unsupported_endpoint",
            f"Model '{req.model}' is served by gRPC engines, which do not serve {req.path}",
            type="not_implemented_error",
        )
