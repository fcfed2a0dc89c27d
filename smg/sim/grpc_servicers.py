"""The servicers of the simulated engine: vLLM's `VllmEngine` and SGLang's `SglangScheduler`.

They only translate between the wire (`grpc_wire`) and `engine_actor.SimEngine`; `_Common` holds
the RPCs both runtimes answer the same way. Served by `grpc_engine.start_server`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.struct_pb2 import Struct
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sgl
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sgl_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vll
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vll_grpc

from smg.sim.engine_actor import GenParams, SimEngine
from smg.sim.engine_core import CapacityError
from smg.sim.grpc_wire import Wire, answer, parse_sglang, parse_vllm
from smg.sim.text import EMBED_DIMS, embedding, fingerprint
from smg.sim.tokenizer_files import tokenizer_zip

SIM_VERSION = "0.1.0-smg-sim"


def lora_id_of(name: str) -> str:
    """The id the sim loaded adapter `name` under (an id unlike the name, as a caller-minted one
    is: a gateway that sent the name would be refused)."""
    return f"lora-{name}-id"


STATS_METADATA_KEY = "x-smg-sim-stats"
TOKENIZER_CHUNK_BYTES = 512 * 1024


class _Common:
    """The RPCs both runtimes answer the same way."""

    health_message = "Health"

    def __init__(self, engine: SimEngine, wire: Wire) -> None:
        self.engine = engine
        self.wire = wire

    def _parse(self, request: Any) -> tuple[Sequence[int] | str, GenParams]:
        raise NotImplementedError

    def _pd_fields(self, request: Any) -> bool:
        """Check the request's PD fields against the role; True when it carries some."""
        raise NotImplementedError

    def _pd_complete(self, request: Any, msg: Any) -> None:
        """Add what this role's final message carries in PD mode (vLLM prefill: KV params)."""

    def _lora(self, request: Any) -> None:
        """Check the adapter a Generate names (SGLang's lora_id); vLLM's contract names none."""

    def _note_rank(self, request: Any) -> None:
        """Count the request under the data-parallel rank it names (-1: none); a rank the engine
        does not have is refused, as a real engine would."""
        try:
            rank = request.data_parallel_rank if request.HasField("data_parallel_rank") else -1
        except ValueError:  # a field without presence (SGLang's Embed), or none (vLLM's Embed)
            rank = getattr(request, "data_parallel_rank", -1)
        if rank >= self.engine.cfg.dp_size:
            raise ValueError(f"data_parallel_rank {rank} >= dp size {self.engine.cfg.dp_size}")
        ranks = self.engine.stats.dp_ranks
        ranks[str(rank)] = ranks.get(str(rank), 0) + 1

    async def Generate(self, request: Any, context: Any) -> AsyncIterator[Any]:
        engine = self.engine
        engine.stats.last_traceparent = traceparent_of(context)
        try:
            if self._pd_fields(request):
                engine.stats.pd_requests += 1
            self._note_rank(request)
            self._lora(request)
            prompt, params = self._parse(request)
            job = await engine.start(request.request_id, prompt, params)
        except ValueError as exc:
            engine.stats.rejected += 1
            capacity = isinstance(exc, CapacityError)
            code = (
                grpc.StatusCode.RESOURCE_EXHAUSTED if capacity else grpc.StatusCode.INVALID_ARGUMENT
            )
            await context.abort(code, str(exc))
            return
        try:
            async for msg in answer(engine, self.wire, job, request.stream):
                if msg.WhichOneof("response") == "complete":
                    self._pd_complete(request, msg.complete)
                yield msg
        finally:
            engine.end(job)

    async def Embed(self, request: Any, context: Any) -> Any:
        """A unit vector of EMBED_DIMS floats that depends only on the seed and the token ids
        (the HTTP sim's vector for the same ids)."""
        engine = self.engine
        ids = list(request.tokenized.input_ids)
        try:
            self._note_rank(request)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not ids or len(ids) > engine.cfg.context_length:
            engine.stats.rejected += 1
            what = "no input tokens" if not ids else f"{len(ids)} tokens exceed the context"
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, what)
        engine.stats.embed_requests += 1
        key = fingerprint((",".join(map(str, ids)),))[0]
        vec = embedding(engine.cfg.seed, key, EMBED_DIMS)
        return self.wire.pb.EmbedResponse(
            embedding=vec, prompt_tokens=len(ids), embedding_dim=len(vec)
        )

    async def HealthCheck(self, request: Any, context: Any) -> Any:
        return self.wire.pb.HealthCheckResponse(healthy=True, message=self.health_message)

    async def FlushCache(self, request: Any, context: Any) -> common_pb2.FlushCacheResponse:
        deadline = self.engine.clock.now() + max(0.0, request.timeout_s)
        while not (ok := self.engine.flush_cache()) and self.engine.clock.now() < deadline:
            await self.engine.clock.sleep(0.01)
        message = "KV cache flushed" if ok else "requests in flight; cache not flushed"
        return common_pb2.FlushCacheResponse(success=ok, message=message)

    async def GetTokenizer(self, request: Any, context: Any) -> AsyncIterator[Any]:
        engine = self.engine
        loop = asyncio.get_running_loop()
        data, sha = await loop.run_in_executor(
            engine.executor, tokenizer_zip, engine.vocab.directory
        )
        if engine.cfg.corrupt_tokenizer_sha:
            sha = sha[::-1]
        view = memoryview(data)
        for start in range(0, len(data), TOKENIZER_CHUNK_BYTES):
            last = start + TOKENIZER_CHUNK_BYTES >= len(data)
            yield common_pb2.GetTokenizerChunk(
                data=bytes(view[start : start + TOKENIZER_CHUNK_BYTES]), sha256=sha if last else ""
            )

    async def SubscribeKvEvents(self, request: Any, context: Any) -> AsyncIterator[Any]:
        stream = self.engine.kv.stream(
            request.start_sequence_number, request.load_records_before_first_batch
        )
        async for batch in stream:
            yield batch

    def _scheduler_load(self) -> Any:
        ld = self.engine.load()
        return self.wire.pb.SchedulerLoad(
            dp_rank=0,
            num_running_reqs=ld.running,
            num_waiting_reqs=ld.waiting,
            num_total_reqs=ld.running + ld.waiting,
            num_used_tokens=ld.used_tokens,
            max_total_num_tokens=ld.capacity_tokens,
            token_usage=ld.token_usage,
            gen_throughput=ld.gen_throughput,
            cache_hit_rate=ld.cache_hit_rate,
            utilization=ld.running / ld.max_batch,
            max_running_requests=ld.max_batch,
            num_waiting_uncached_tokens=ld.waiting_uncached_tokens,
        )

    def _stats_metadata(self, context: Any) -> None:
        stats = json.dumps(self.engine.stats.snapshot(), separators=(",", ":"))
        context.set_trailing_metadata(((STATS_METADATA_KEY, stats),))

    def _timestamp(self) -> str:
        return datetime.fromtimestamp(self.engine.wall(), tz=UTC).isoformat()

    def _model_fields(self) -> dict[str, Any]:
        engine, vocab = self.engine, self.engine.vocab
        return {
            "model_path": engine.cfg.model,
            "served_model_name": engine.cfg.model,
            "tokenizer_path": str(vocab.directory),
            "is_generation": True,
            "max_context_length": engine.cfg.context_length,
            "vocab_size": vocab.vocab_size,
            "supports_vision": False,
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "eos_token_ids": list(vocab.eos_ids),
            "pad_token_id": vocab.pad_id,
            "bos_token_id": vocab.bos_id,
        }


class VllmServicer(_Common, vll_grpc.VllmEngineServicer):
    def __init__(self, engine: SimEngine) -> None:
        super().__init__(engine, Wire(vll, engine.vocab))

    def _parse(self, request: Any) -> tuple[Sequence[int] | str, GenParams]:
        return parse_vllm(request, self.engine.cfg.context_length)

    def _pd_fields(self, request: Any) -> bool:
        has = request.HasField("kv_transfer_params_json") or request.HasField("kv_transfer_params")
        if self.engine.cfg.role == "decode":
            if not request.HasField("kv_transfer_params_json"):
                raise ValueError("a decode engine needs kv_transfer_params_json from a prefill")
            params = json.loads(request.kv_transfer_params_json or "null")
            if not isinstance(params, dict) or not params.get("remote_block_ids"):
                raise ValueError("kv_transfer_params_json has no remote_block_ids")
        return has

    def _pd_complete(self, request: Any, msg: Any) -> None:
        if self.engine.cfg.role != "prefill":
            return
        ids = list(request.tokenized.input_ids)
        block = self.engine.cfg.core.block_size
        params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": f"sim-{self.engine.cfg.port}",
            "remote_block_ids": list(range((len(ids) + block - 1) // block or 1)),
            "remote_host": self.engine.cfg.host,
            "remote_port": self.engine.cfg.port,
            "remote_request_id": request.request_id,
        }
        msg.kv_transfer_params_json = json.dumps(params, separators=(",", ":"))

    async def Abort(self, request: vll.AbortRequest, context: Any) -> vll.AbortResponse:
        self.engine.abort(list(request.request_ids))
        return vll.AbortResponse()

    async def GetModelInfo(self, request: Any, context: Any) -> vll.GetModelInfoResponse:
        fields = self._model_fields()
        return vll.GetModelInfoResponse(
            **fields, max_req_input_len=fields["max_context_length"],
            default_sampling_params_json="",
        )  # fmt: skip

    async def GetServerInfo(self, request: Any, context: Any) -> vll.GetServerInfoResponse:
        engine = self.engine
        self._stats_metadata(context)
        return vll.GetServerInfoResponse(
            active_requests=engine.stats.in_flight,
            is_paused=False,
            last_receive_timestamp=engine.last_receive,
            uptime_seconds=engine.wall() - engine.started_at,
            server_type="vllm-grpc",
            kv_connector="" if engine.cfg.role == "regular" else "NixlConnector",
            kv_role={"prefill": "kv_producer", "decode": "kv_consumer"}.get(engine.cfg.role, ""),
            data_parallel_size=engine.cfg.dp_size,
            kv_cache_dtype="auto",
            block_size=engine.cfg.core.block_size,
            model_dtype="torch.bfloat16",
            max_num_seqs=engine.cfg.core.max_batch,
        )

    async def GetLoads(self, request: Any, context: Any) -> vll.GetLoadsResponse:
        return vll.GetLoadsResponse(
            timestamp=self._timestamp(), version=SIM_VERSION, dp_rank_count=1,
            loads=[self._scheduler_load()],
        )  # fmt: skip


class SglangServicer(_Common, sgl_grpc.SglangSchedulerServicer):
    health_message = "Health check passed"

    def __init__(self, engine: SimEngine) -> None:
        super().__init__(engine, Wire(sgl, engine.vocab))

    def _parse(self, request: Any) -> tuple[Sequence[int] | str, GenParams]:
        return parse_sglang(request, self.engine.cfg.context_length)

    def _pd_fields(self, request: Any) -> bool:
        has = request.HasField("disaggregated_params")
        if self.engine.cfg.role == "decode":
            dp = request.disaggregated_params
            if not has or not dp.bootstrap_host:
                raise ValueError("a decode engine needs disaggregated_params (bootstrap host/room)")
            if not 0 < dp.bootstrap_port < 65536:
                # a real decode would dial host:0 and fail (or hang) on the KV transfer
                raise ValueError(f"bootstrap_port {dp.bootstrap_port} is no port to reach")
            self.engine.stats.last_bootstrap_port = dp.bootstrap_port
        return has

    def _lora(self, request: Any) -> None:
        if not request.lora_id:
            return
        if request.lora_id not in {lora_id_of(a) for a in self.engine.cfg.adapters}:
            raise ValueError(f"LoRA adapter {request.lora_id!r} is not loaded")
        self.engine.stats.lora_requests += 1

    async def ListLoadedLoRAAdapters(
        self, request: Any, context: Any
    ) -> sgl.ListLoadedLoRAAdaptersResponse:
        return sgl.ListLoadedLoRAAdaptersResponse(
            loaded_adapters=[
                sgl.LoadedLoRAAdapter(
                    lora_id=lora_id_of(a), lora_name=a, lora_path=f"/adapters/{a}"
                )
                for a in self.engine.cfg.adapters
            ]
        )

    async def Abort(self, request: sgl.AbortRequest, context: Any) -> sgl.AbortResponse:
        found = self.engine.abort([request.request_id])
        verdict = "aborted" if found else "not found"
        return sgl.AbortResponse(
            success=bool(found), message=f"Request {request.request_id} {verdict}"
        )

    async def GetModelInfo(self, request: Any, context: Any) -> sgl.GetModelInfoResponse:
        fields = self._model_fields()
        return sgl.GetModelInfoResponse(
            **fields, max_req_input_len=fields["max_context_length"] - 1,
            preferred_sampling_params="", weight_version="default",
        )  # fmt: skip

    async def GetServerInfo(self, request: Any, context: Any) -> sgl.GetServerInfoResponse:
        engine, cfg = self.engine, self.engine.cfg
        self._stats_metadata(context)
        server_args, scheduler_info = Struct(), Struct()
        server_args.update({
            "model_path": cfg.model, "served_model_name": cfg.model,
            "tokenizer_path": str(engine.vocab.directory), "context_length": cfg.context_length,
            "max_running_requests": cfg.core.max_batch, "page_size": cfg.core.block_size,
            "random_seed": cfg.seed, "sim": True, "dp_size": cfg.dp_size,
            "disaggregation_mode": "null" if cfg.role == "regular" else cfg.role,
            "disaggregation_bootstrap_port": cfg.bootstrap_port,
        })  # fmt: skip
        scheduler_info.update({
            "max_total_num_tokens": cfg.core.kv_capacity_tokens,
            "max_req_input_len": cfg.context_length - 1,
            "sim_stats": engine.stats.snapshot(),
        })  # fmt: skip
        response = sgl.GetServerInfoResponse(
            server_args=server_args, scheduler_info=scheduler_info,
            active_requests=engine.stats.in_flight, is_paused=False,
            last_receive_timestamp=engine.last_receive,
            uptime_seconds=engine.wall() - engine.started_at, sglang_version=SIM_VERSION,
            server_type="grpc", max_total_num_tokens=cfg.core.kv_capacity_tokens,
        )  # fmt: skip
        response.start_time.FromSeconds(int(engine.started_at))
        return response

    async def GetLoads(self, request: sgl.GetLoadsRequest, context: Any) -> sgl.GetLoadsResponse:
        load = self._scheduler_load()
        sections = set(request.include)
        if sections & {"memory", "all"}:
            load.memory.token_capacity = self.engine.cfg.core.kv_capacity_tokens
        if sections & {"queues", "all"}:
            load.queues.waiting = load.num_waiting_reqs
        return sgl.GetLoadsResponse(
            timestamp=self._timestamp(), version=SIM_VERSION, dp_rank_count=1, loads=[load],
            aggregate=sgl.AggregateMetrics(
                total_running_reqs=load.num_running_reqs, total_waiting_reqs=load.num_waiting_reqs,
                total_reqs=load.num_total_reqs, avg_token_usage=load.token_usage,
                avg_throughput=load.gen_throughput, avg_utilization=load.utilization,
            ),
        )  # fmt: skip


def traceparent_of(context: Any) -> str:
    """The call's W3C `traceparent` metadata ("" without one): tests read it in /sim/stats."""
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            return str(value)
    return ""
