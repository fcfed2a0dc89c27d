"""The simulated OpenAI-compatible worker (`smg sim`): an aiohttp app that answers the way vLLM and
SGLang servers do, so a gateway can register, probe, load-balance and stream from it.

Output text comes from `smg.sim.text` (deterministic per worker seed, request seed and prompt).
Latency is simulated with an injectable `clock_sleep`: `first_token_ms` before the first token,
then 1/`tokens_per_second` between tokens; non-streaming answers take both as one sleep. With no
decode delay a stream is written `_BATCH_TOKENS` chunks per write, yielding to the loop between
writes, so the worker stays cheap at thousands of requests per second.

Behaviour can change live (`POST /sim/config`, `POST /sim/health`); the handlers read one
immutable `Behaviour` snapshot per request. `GET /sim/stats` reports counters:
requests (generation + embedding requests received), completed (answered in full), failed
(answered with an error: bad input, injected failure, status override), cancelled_streams
(streams whose client left; generation stops at the next write or, under `serve`, at once),
in_flight.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import os
import random
import signal
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from smg.config import SimConfig
from smg.errors import ApiError, invalid_json, invalid_request, missing_field
from smg.sim.plan import CONTEXT_LENGTH, Plan, int_field, plan_request, prompt_keys
from smg.sim.text import TextGen, embedding, spans

Sleep = Callable[[float], Awaitable[None]]

SIM_VERSION = "0.1.0-smg-sim"
EMBED_DIMS = 8
MAX_EMBED_DIMS = 4096
_BATCH_TOKENS = 64  # stream chunks per write when there is no decode delay
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"
_CHUNK_HEAD = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":'
_ROLE_TAIL = (
    b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
)
_CHAT_END = b'"delta":{},"logprobs":null,"finish_reason":"%s"}]}\n\n'
_TEXT_END = b'"text":"","logprobs":null,"finish_reason":"%s"}]}\n\n'


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the worker does now; swapped whole by the control endpoints."""

    failure_rate: float
    first_token_ms: float
    tokens_per_second: float
    output_tokens: int
    status_override: int | None = None
    healthy: bool = True


@dataclass(slots=True)
class Stats:
    requests: int = 0
    completed: int = 0
    failed: int = 0
    cancelled_streams: int = 0
    in_flight: int = 0
    in_flight_tokens: int = 0
    # PD: generation requests seen per bootstrap_room (as a string: JSON keys)
    rooms: dict[str, int] = dataclasses.field(default_factory=dict)


def _error_response(err: ApiError) -> web.Response:
    return web.Response(status=err.status, body=err.to_json(), content_type="application/json")


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")


async def _read_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_json(str(exc)) from None
    if not isinstance(body, dict):
        raise invalid_request("Request body must be a JSON object")
    return body


class SimWorker:
    """The state of one simulated worker; lives on one event loop, so no locks."""

    def __init__(self, cfg: SimConfig, clock_sleep: Sleep = asyncio.sleep) -> None:
        self.cfg = cfg
        self.sleep = clock_sleep
        self.behaviour = Behaviour(
            failure_rate=cfg.failure_rate,
            first_token_ms=cfg.first_token_ms,
            tokens_per_second=cfg.tokens_per_second,
            output_tokens=cfg.output_tokens,
            healthy=not cfg.unhealthy,
        )
        self.stats = Stats()
        self.gen = TextGen(cfg.seed)
        self._fail_rng = random.Random(cfg.seed ^ 0x5EED_FA11)
        self._ids = itertools.count(1)
        self._id_tag = os.urandom(4).hex()
        self._created = int(time.time())
        # Per-position chunk tails: a chunk is `head + tail`, so a batch is `head.join(tails)`.
        self._chat_tails = self.gen.map(
            lambda w: (
                b'"delta":{"content":%s},"logprobs":null,"finish_reason":null}]}\n\n'
                % orjson.dumps(w)
            )
        )
        self._text_tails = self.gen.map(
            lambda w: b'"text":%s,"logprobs":null,"finish_reason":null}]}\n\n' % orjson.dumps(w)
        )

    # ---- generation -------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "text")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._hot(request, "embed")

    async def _hot(self, request: web.Request, kind: str) -> web.StreamResponse:
        st = self.stats
        st.requests += 1
        st.in_flight += 1
        try:
            beh = self.behaviour
            body = await _read_object(request)
            if kind == "embed":
                return await self._embed(body, beh)
            return await self._generate(request, body, beh, kind == "chat")
        except ApiError as err:
            st.failed += 1
            return _error_response(err)
        finally:
            st.in_flight -= 1

    def _check_failure(self, beh: Behaviour) -> None:
        if beh.status_override is not None:
            code = beh.status_override
            raise ApiError(code, "sim_status_override", f"Simulated status {code}")
        if beh.failure_rate > 0 and self._fail_rng.random() < beh.failure_rate:
            raise ApiError(500, "sim_injected_failure", "Simulated worker failure")

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{self._id_tag}{next(self._ids):x}"

    async def _generate(
        self, request: web.Request, body: dict[str, Any], beh: Behaviour, chat: bool
    ) -> web.StreamResponse:
        body = self._pd_role(body)
        tokens, model = beh.output_tokens, self.cfg.model
        plan = plan_request(
            body, chat=chat, default_tokens=tokens, default_model=model, gen=self.gen
        )
        self._check_failure(beh)
        tokens = plan.prompt_tokens + plan.max_tokens * len(plan.offsets)
        self.stats.in_flight_tokens += tokens
        try:
            if plan.stream:
                return await self._stream(request, plan, beh)
            return await self._unary(plan, beh)
        finally:
            self.stats.in_flight_tokens -= tokens

    def _pd_role(self, body: dict[str, Any]) -> dict[str, Any]:
        """Count the request's bootstrap room; a decode worker insists on the bootstrap fields,
        a prefill worker answers one token (its real output is the KV cache it hands over)."""
        room = body.get("bootstrap_room")
        role = self.cfg.role
        if role == "decode":
            host, port = body.get("bootstrap_host"), body.get("bootstrap_port", "missing")
            if not isinstance(host, str) or type(room) is not int:
                raise invalid_request(
                    "A decode worker needs bootstrap_host and bootstrap_room",
                    param="bootstrap_room",
                )
            if port is not None and type(port) is not int:
                raise invalid_request(
                    "bootstrap_port must be an integer or null", param="bootstrap_port"
                )
        if room is not None:
            key = str(room)
            self.stats.rooms[key] = self.stats.rooms.get(key, 0) + 1
        if role == "prefill":
            body = {k: v for k, v in body.items() if k != "max_completion_tokens"}
            body["max_tokens"] = 1
        return body

    def _usage(self, plan: Plan) -> dict[str, int]:
        completion = plan.max_tokens * len(plan.offsets)
        return {
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": plan.prompt_tokens + completion,
        }

    async def _unary(self, plan: Plan, beh: Behaviour) -> web.Response:
        delay = beh.first_token_ms / 1000.0
        if beh.tokens_per_second > 0 and plan.max_tokens > 1:
            delay += (plan.max_tokens - 1) / beh.tokens_per_second
        if delay > 0:
            await self.sleep(delay)
        choices = []
        for index, offset in enumerate(plan.offsets):
            text = self.gen.text(offset, plan.max_tokens)
            choice: dict[str, Any] = {"index": index}
            if plan.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            choice["logprobs"] = None
            choice["finish_reason"] = plan.finish
            choices.append(choice)
        answer = {
            "id": self._new_id("chatcmpl" if plan.chat else "cmpl"),
            "object": "chat.completion" if plan.chat else "text_completion",
            "created": int(time.time()),
            "model": plan.model,
            "choices": choices,
            "usage": self._usage(plan),
        }
        self.stats.completed += 1
        return _json(answer)

    async def _stream(self, request: web.Request, plan: Plan, beh: Behaviour) -> web.StreamResponse:
        rid = self._new_id("chatcmpl" if plan.chat else "cmpl")
        obj = "chat.completion.chunk" if plan.chat else "text_completion"
        created = int(time.time())
        prefix = _CHUNK_HEAD % (rid.encode(), obj.encode(), created, orjson.dumps(plan.model))
        heads = [prefix + b"%d," % i for i in range(len(plan.offsets))]
        tails = self._chat_tails if plan.chat else self._text_tails
        gap = 1.0 / beh.tokens_per_second if beh.tokens_per_second > 0 else 0.0
        batch = 1 if gap else _BATCH_TOKENS
        out: list[bytes] = [head + _ROLE_TAIL for head in heads] if plan.chat else []
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        try:
            if beh.first_token_ms > 0:
                await self.sleep(beh.first_token_ms / 1000.0)
            await resp.prepare(request)
            total, done = plan.max_tokens, 0
            while True:
                count = min(batch, total - done)
                for head, offset in zip(heads, plan.offsets, strict=True):
                    for begin, end in spans(offset, done, count):
                        out.append(head)
                        out.append(head.join(tails[begin:end]))
                done += count
                if done >= total:
                    break
                await resp.write(b"".join(out))
                out.clear()
                await (self.sleep(gap) if gap else asyncio.sleep(0))
            end_tail = (_CHAT_END if plan.chat else _TEXT_END) % plan.finish.encode()
            out.extend(head + end_tail for head in heads)
            if plan.include_usage:
                usage = {"id": rid, "object": obj, "created": created, "model": plan.model}
                usage |= {"choices": [], "usage": self._usage(plan)}
                out.append(b"data: %s\n\n" % orjson.dumps(usage))
            out.append(_DONE)
            await resp.write(b"".join(out))
            await resp.write_eof()
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError: the client left
            self.stats.cancelled_streams += 1
            return resp
        except asyncio.CancelledError:  # handler cancelled because the client left
            self.stats.cancelled_streams += 1
            raise
        self.stats.completed += 1
        return resp

    async def _embed(self, body: dict[str, Any], beh: Behaviour) -> web.Response:
        if body.get("input") is None:
            raise missing_field("input")
        keys = prompt_keys(body["input"])  # the same shapes as a completions prompt
        dims = int_field(body, "dimensions", EMBED_DIMS, 1, MAX_EMBED_DIMS)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise invalid_request(
                "'encoding_format' must be float or base64", param="encoding_format"
            )
        self._check_failure(beh)
        if beh.first_token_ms > 0:
            await self.sleep(beh.first_token_ms / 1000.0)
        data = []
        for index, (crc, _) in enumerate(keys):
            vec = embedding(self.cfg.seed, crc, dims)
            value: Any = vec
            if fmt == "base64":
                value = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode()
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(t for _, t in keys)
        model = body.get("model")
        self.stats.completed += 1
        return _json(
            {
                "object": "list",
                "data": data,
                "model": model if isinstance(model, str) else self.cfg.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    # ---- discovery and health ---------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self.behaviour.healthy:
            return web.Response(status=200)
        return _error_response(ApiError(503, "sim_unhealthy", "Simulated worker is unhealthy"))

    async def models(self, request: web.Request) -> web.Response:
        m = self.cfg.model
        card = {"id": m, "object": "model", "created": self._created, "owned_by": "smg-sim"}
        card |= {"root": m, "parent": None, "max_model_len": CONTEXT_LENGTH}
        return _json({"object": "list", "data": [card]})

    async def version(self, request: web.Request) -> web.Response:
        return _json({"version": SIM_VERSION})

    async def model_info(self, request: web.Request) -> web.Response:
        m = self.cfg.model
        info = {"model_path": m, "tokenizer_path": m, "is_generation": True}
        info |= {"preferred_sampling_params": None, "weight_version": "default"}
        return _json(info)

    async def server_info(self, request: web.Request) -> web.Response:
        """Like SGLang's /get_server_info: server args plus internal states."""
        cfg, st = self.cfg, self.stats
        info: dict[str, Any] = {"model_path": cfg.model, "served_model_name": cfg.model}
        info |= {"tokenizer_path": cfg.model, "host": cfg.host, "port": cfg.port}
        info |= {"tp_size": 1, "dp_size": 1, "pp_size": 1, "context_length": CONTEXT_LENGTH}
        info |= {"max_total_num_tokens": 1_000_000, "max_running_requests": 4096}
        info |= {"max_req_input_len": CONTEXT_LENGTH - 1, "version": SIM_VERSION}
        info |= {"disaggregation_mode": "null" if cfg.role == "regular" else cfg.role}
        info["disaggregation_bootstrap_port"] = cfg.bootstrap_port
        info["internal_states"] = [{"last_gen_throughput": 0.0, "load": st.in_flight}]
        return _json(info)

    async def get_load(self, request: web.Request) -> web.Response:
        """SGLang's shape: one entry per data-parallel rank."""
        st = self.stats
        load = {"dp_rank": 0, "num_reqs": st.in_flight, "num_waiting_reqs": 0}
        load["num_tokens"] = st.in_flight_tokens
        return _json([load])

    # ---- control ----------------------------------------------------------------------------

    async def set_health(self, request: web.Request) -> web.Response:
        try:
            body = await _read_object(request)
            healthy = body.get("healthy")
            if type(healthy) is not bool:
                raise invalid_request("'healthy' must be a boolean", param="healthy")
        except ApiError as err:
            return _error_response(err)
        self.behaviour = dataclasses.replace(self.behaviour, healthy=healthy)
        return _json({"healthy": healthy})

    async def set_config(self, request: web.Request) -> web.Response:
        try:
            changes = _behaviour_changes(await _read_object(request))
        except ApiError as err:
            return _error_response(err)
        self.behaviour = dataclasses.replace(self.behaviour, **changes)
        return _json(dataclasses.asdict(self.behaviour))

    async def get_config(self, request: web.Request) -> web.Response:
        return _json(dataclasses.asdict(self.behaviour))

    async def get_stats(self, request: web.Request) -> web.Response:
        return _json(dataclasses.asdict(self.stats))


def _behaviour_changes(body: dict[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name, value in body.items():
        number = type(value) in (int, float)
        if name == "failure_rate" and number and 0.0 <= value <= 1.0:
            changes[name] = float(value)
        elif name in ("first_token_ms", "tokens_per_second") and number and value >= 0:
            changes[name] = float(value)
        elif name == "output_tokens" and type(value) is int and 0 <= value <= CONTEXT_LENGTH:
            changes[name] = value
        elif name == "status_override" and (
            value is None or (type(value) is int and 100 <= value <= 599)
        ):
            changes[name] = value
        else:
            raise invalid_request(f"Bad or unknown sim setting: {name}={value!r}", param=name)
    return changes


WORKER_KEY = web.AppKey("smg_sim_worker", SimWorker)


def build_app(cfg: SimConfig, *, clock_sleep: Sleep = asyncio.sleep) -> web.Application:
    worker = SimWorker(cfg, clock_sleep)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[WORKER_KEY] = worker
    add = app.router.add_route
    add("POST", "/v1/chat/completions", worker.chat)
    add("POST", "/v1/completions", worker.completions)
    add("POST", "/v1/embeddings", worker.embeddings)
    add("GET", "/health", worker.health)
    add("GET", "/health_generate", worker.health)
    add("GET", "/v1/models", worker.models)
    add("GET", "/version", worker.version)
    add("GET", "/get_server_info", worker.server_info)
    add("GET", "/server_info", worker.server_info)
    add("GET", "/get_model_info", worker.model_info)
    add("GET", "/get_load", worker.get_load)
    add("POST", "/sim/health", worker.set_health)
    add("POST", "/sim/config", worker.set_config)
    add("GET", "/sim/config", worker.get_config)
    add("GET", "/sim/stats", worker.get_stats)
    return app


def worker_of(app: web.Application) -> SimWorker:
    """The in-process worker behind an app from `build_app` (for tests and dev mode)."""
    return app[WORKER_KEY]


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Listen on (host, port); port 0 picks a free one. Returns the runner and the bound port.

    Handlers are cancelled when their client disconnects, so a stream waiting out its first-token
    delay stops at once. The caller owns the runner and must `await runner.cleanup()`.
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
    except Exception:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


async def serve(cfg: SimConfig) -> None:
    """Run the worker until cancelled."""
    runner, port = await start(build_app(cfg), cfg.host, cfg.port)
    try:
        host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        print(f"smg sim listening on http://{host}:{port} model={cfg.model}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(cfg: SimConfig) -> None:
    """Blocking entry point of `smg sim`: uvloop when installed; SIGINT/SIGTERM stop it cleanly."""

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
                    loop.add_signal_handler(sig, task.cancel)
        await serve(cfg)

    try:
        import uvloop
    except ImportError:
        runner: Callable[[Any], Any] = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        runner(main())
