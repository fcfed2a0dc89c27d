"""A simulated HTTP worker's state and its discovery, health and control handlers.

`SimAdmin` holds what a worker is and does now: its config, the live `Behaviour` (swapped whole
by `POST /sim/config` and `POST /sim/health`; the handlers read one snapshot per request) and
the `Stats` counters that `GET /sim/stats` reports. Its handlers answer the discovery calls a
gateway makes (/health, /v1/models, /get_server_info, /get_model_info, /get_load, /version,
/metrics, /flush_cache) and the tests' control calls. The generation handlers are
`http_handlers.SimWorker`'s, which extends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from smg.config import SimConfig
from smg.errors import ApiError, invalid_request
from smg.sim.http_wire import behaviour_changes, error_response, json_response, read_object
from smg.sim.plan import CONTEXT_LENGTH

Sleep = Callable[[float], Awaitable[None]]

SIM_VERSION = "0.1.0-smg-sim"


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the worker does now; swapped whole by the control endpoints."""

    failure_rate: float
    first_token_ms: float
    tokens_per_second: float
    output_tokens: int
    status_override: int | None = None
    healthy: bool = True
    health_delay_ms: float = 0.0  # /health answers this late (a slow probe under load)


@dataclass(slots=True)
class Stats:
    requests: int = 0
    completed: int = 0
    failed: int = 0
    cancelled_streams: int = 0
    in_flight: int = 0
    in_flight_tokens: int = 0
    cache_flushes: int = 0  # POST /flush_cache answered
    flush_authorization: str = ""  # the last one's Authorization header (tests: which key came)
    # PD: generation requests seen per bootstrap_room (as a string: JSON keys)
    rooms: dict[str, int] = dataclasses.field(default_factory=dict)
    # requests per data_parallel_rank named in their body ("-1": none named), as the gRPC sim
    dp_ranks: dict[str, int] = dataclasses.field(default_factory=dict)
    last_traceparent: str = ""  # the W3C traceparent header of the last request (tests)


class SimAdmin:
    """The state of one simulated worker, with its discovery, health and control handlers."""

    def __init__(self, cfg: SimConfig, clock_sleep: Sleep = asyncio.sleep) -> None:
        self.cfg = cfg
        self.sleep = clock_sleep
        self.behaviour = Behaviour(
            failure_rate=cfg.failure_rate,
            first_token_ms=cfg.first_token_ms,
            tokens_per_second=cfg.tokens_per_second,
            output_tokens=cfg.output_tokens,
            healthy=not cfg.unhealthy,
            health_delay_ms=cfg.health_delay_ms,
        )
        self.stats = Stats()
        self._rank_load = [0] * max(1, cfg.dp_size)  # requests in flight per data-parallel rank
        self._created = int(time.time())

    # ---- discovery and health ---------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        delay_ms = self.behaviour.health_delay_ms
        if delay_ms > 0:
            await self.sleep(delay_ms / 1000)
        if self.behaviour.healthy:
            return web.Response(status=200)
        return error_response(ApiError(503, "sim_unhealthy", "Simulated worker is unhealthy"))

    async def models(self, request: web.Request) -> web.Response:
        m = self.cfg.model
        card = {"id": m, "object": "model", "created": self._created, "owned_by": "smg-sim"}
        card |= {"root": m, "parent": None, "max_model_len": CONTEXT_LENGTH}
        # LoRA adapters as vLLM lists them: after the base model, each with it as parent
        cards = [card] + [
            card | {"id": a, "root": f"/adapters/{a}", "parent": m} for a in self.cfg.adapters
        ]
        return json_response({"object": "list", "data": cards})

    async def flush_cache(self, request: web.Request) -> web.Response:
        """SGLang's admin endpoint: 200 and a line of text (the sim keeps no prefix cache)."""
        self.stats.cache_flushes += 1
        self.stats.flush_authorization = request.headers.get("Authorization", "")
        return web.Response(text="Cache flushed.\n")

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": SIM_VERSION})

    async def model_info(self, request: web.Request) -> web.Response:
        m = self.cfg.model
        info = {"model_path": m, "tokenizer_path": m, "is_generation": True}
        info |= {"preferred_sampling_params": None, "weight_version": "default"}
        return json_response(info)

    async def server_info(self, request: web.Request) -> web.Response:
        """Like SGLang's /get_server_info: server args plus internal states."""
        cfg, st = self.cfg, self.stats
        info: dict[str, Any] = {"model_path": cfg.model, "served_model_name": cfg.model}
        info |= {"tokenizer_path": cfg.model, "host": cfg.host, "port": cfg.port}
        info |= {"tp_size": 1, "dp_size": cfg.dp_size, "pp_size": 1}
        info["context_length"] = CONTEXT_LENGTH
        info |= {"max_total_num_tokens": 1_000_000, "max_running_requests": 4096}
        info |= {"max_req_input_len": CONTEXT_LENGTH - 1, "version": SIM_VERSION}
        info |= {"disaggregation_mode": "null" if cfg.role == "regular" else cfg.role}
        info["disaggregation_bootstrap_port"] = cfg.bootstrap_port
        info["internal_states"] = [{"last_gen_throughput": 0.0, "load": st.in_flight}]
        return json_response(info)

    async def get_load(self, request: web.Request) -> web.Response:
        """SGLang's shape: one entry per data-parallel rank (tokens: all on rank 0)."""
        loads = []
        for rank, running in enumerate(self._rank_load):
            load = {"dp_rank": rank, "num_reqs": running, "num_waiting_reqs": 0}
            load["num_tokens"] = self.stats.in_flight_tokens if rank == 0 else 0
            loads.append(load)
        return json_response(loads)

    # ---- control ----------------------------------------------------------------------------

    async def set_health(self, request: web.Request) -> web.Response:
        try:
            body = await read_object(request)
            healthy = body.get("healthy")
            if type(healthy) is not bool:
                raise invalid_request("'healthy' must be a boolean", param="healthy")
        except ApiError as err:
            return error_response(err)
        self.behaviour = dataclasses.replace(self.behaviour, healthy=healthy)
        return json_response({"healthy": healthy})

    async def set_config(self, request: web.Request) -> web.Response:
        try:
            changes = behaviour_changes(await read_object(request))
        except ApiError as err:
            return error_response(err)
        self.behaviour = dataclasses.replace(self.behaviour, **changes)
        return json_response(dataclasses.asdict(self.behaviour))

    async def get_config(self, request: web.Request) -> web.Response:
        return json_response(dataclasses.asdict(self.behaviour))

    async def metrics(self, request: web.Request) -> web.Response:
        """The engine's own Prometheus series, named as vLLM names them (what a gateway's
        /engine_metrics re-exports)."""
        st, model = self.stats, self.cfg.model
        text = (
            "# HELP vllm:num_requests_running Requests running on the engine.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{model}"}} {st.in_flight}\n'
            "# HELP vllm:request_success_total Requests answered in full.\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{model_name="{model}"}} {st.completed}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def get_stats(self, request: web.Request) -> web.Response:
        return json_response(dataclasses.asdict(self.stats))
