"""The control plane of one engine (vLLM or SGLang): the short calls on its probe channel.

Health (the standard `grpc.health.v1` service, else the engine's own HealthCheck), model and
server info, data-parallel size, LoRA adapters, loads, cache flush, Abort and the tokenizer
download. The probe channel has no keepalive (short unary calls), so a probe never shares the
fate of a data connection a server closed for pinging. Errors are classified as the data
plane's (`UpstreamError`, `EngineError`). `EngineClient` (grpc.py) adds the data plane.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import structlog
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto.generated import (
    common_pb2,
    sglang_scheduler_pb2,
    sglang_scheduler_pb2_grpc,
    vllm_engine_pb2,
    vllm_engine_pb2_grpc,
)

from smg.pipeline.backends.grpc_contract import PROTO_MODULES, SERVICE_NAMES, SGLANG, VLLM
from smg.pipeline.backends.grpc_errors import EngineError, classify
from smg.pipeline.backends.grpc_replies import loads_from, model_info_from
from smg.pipeline.backends.grpc_requests import build_aborts
from smg.pipeline.backends.http import UpstreamError
from smg.pipeline.engine_types import EngineModelInfo

log = structlog.get_logger("smg.grpc")


def stub_for(runtime: str, channel: grpc.aio.Channel) -> Any:
    """The runtime's service stub on `channel`."""
    stub_class = (
        vllm_engine_pb2_grpc.VllmEngineStub
        if runtime == VLLM
        else sglang_scheduler_pb2_grpc.SglangSchedulerStub
    )
    return stub_class(channel)


class EngineControl:
    """One engine's control calls: health, model info, loads, abort, tokenizer chunks."""

    def __init__(
        self,
        url: str,
        runtime: str,
        probe: grpc.aio.Channel,
        *,
        rpc_timeout_s: float = 5.0,
        abort_timeout_s: float = 1.0,
    ) -> None:
        if runtime not in SERVICE_NAMES:
            raise ValueError(f"unknown runtime {runtime!r}: expected 'vllm' or 'sglang'")
        self.url = url
        self.runtime = runtime
        self.rpc_timeout_s = rpc_timeout_s  # each control-plane call's deadline
        self.abort_timeout_s = abort_timeout_s
        self._probe_channel = probe
        self._pb = PROTO_MODULES[runtime]
        self._probe: Any = stub_for(runtime, probe)
        self._health: Any = health_pb2_grpc.HealthStub(probe)
        self._standard_health: bool | None = None  # None: not asked yet
        self.lora_ids: dict[str, str] = {}  # adapter name -> its engine id (lora_adapters)

    async def health(self, timeout_s: float | None = None) -> bool:
        """`grpc.health.v1.Health/Check` for the engine's service (then the server as a whole if
        that name is unknown); the engine's own HealthCheck RPC when the standard service is not
        there (SGLang's generates one token: give it a few seconds)."""
        timeout = timeout_s or self.rpc_timeout_s
        if self._standard_health is not False:
            for service in (SERVICE_NAMES[self.runtime], ""):
                try:
                    answer = await self._health.Check(
                        health_pb2.HealthCheckRequest(service=service), timeout=timeout
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.NOT_FOUND:
                        continue
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        self._standard_health = False
                        break
                    return False
                self._standard_health = True
                return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
        try:
            reply = await self._probe.HealthCheck(self._pb.HealthCheckRequest(), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.healthy)

    async def model_info(self) -> EngineModelInfo:
        info = await self._unary(self._probe.GetModelInfo, self._pb.GetModelInfoRequest())
        server = None
        if not info.max_context_length:  # SGLang may carry it in its server args only
            try:
                server = await self._unary(
                    self._probe.GetServerInfo, self._pb.GetServerInfoRequest()
                )
            except (UpstreamError, EngineError) as exc:
                log.debug("server_info_unavailable", url=self.url, error=str(exc))
        return model_info_from(self.runtime, info, server)

    async def dp_size(self, timeout_s: float | None = None) -> int:
        """The engine's data-parallel ranks: vLLM's `data_parallel_size`, SGLang's server arg
        `dp_size` (1 when it reports none)."""
        reply = await self._unary(
            self._probe.GetServerInfo, self._pb.GetServerInfoRequest(), timeout_s
        )
        if self.runtime == VLLM:
            return max(1, int(reply.data_parallel_size))
        size = json_format.MessageToDict(reply.server_args).get("dp_size")
        return max(1, int(size)) if isinstance(size, int | float) else 1

    async def lora_adapters(self, timeout_s: float | None = None) -> dict[str, str] | None:
        """The engine's loaded LoRA adapters, name -> the id requests name them by (SGLang's
        ListLoadedLoRAAdapters); None when the runtime has no such call (vLLM's contract) or the
        engine does not implement it. Kept as `lora_ids` for the requests that follow."""
        if self.runtime != SGLANG:
            return None
        try:
            reply = await self._unary(
                self._probe.ListLoadedLoRAAdapters,
                sglang_scheduler_pb2.ListLoadedLoRAAdaptersRequest(),
                timeout_s,
            )
        except EngineError as exc:
            if exc.status == "UNIMPLEMENTED":
                return None
            raise
        found = {a.lora_name or a.lora_id: a.lora_id or a.lora_name for a in reply.loaded_adapters}
        self.lora_ids = found
        return found

    async def server_args(self, timeout_s: float | None = None) -> dict[str, Any]:
        """An SGLang engine's `GetServerInfo().server_args` as a dict (PD mode reads a prefill's
        KV bootstrap port there). Struct numbers come back as floats."""
        reply = await self._unary(
            self._probe.GetServerInfo, self._pb.GetServerInfoRequest(), timeout_s
        )
        return json_format.MessageToDict(reply.server_args)

    async def loads(self) -> dict[str, Any]:
        """Running/waiting requests and token usage, summed over the engine's DP ranks."""
        if self.runtime == SGLANG:
            request = sglang_scheduler_pb2.GetLoadsRequest(include=["core"])
        else:
            request = vllm_engine_pb2.GetLoadsRequest()
        return loads_from(await self._unary(self._probe.GetLoads, request))

    async def flush_cache(self, timeout_s: float) -> tuple[bool, str]:
        """FlushCache (both runtimes): the engine drops its prefix cache now (`timeout_s` 0 of
        the engine: it refuses while requests run); (success, the engine's message)."""
        reply = await self._unary(
            self._probe.FlushCache, common_pb2.FlushCacheRequest(timeout_s=0.0), timeout_s
        )
        return bool(reply.success), str(reply.message)

    async def tokenizer_chunks(self, timeout_s: float = 120.0) -> AsyncIterator[tuple[bytes, str]]:
        """The GetTokenizer stream as (data, sha256) pairs; sha256 is set on the last only."""
        call = self._probe.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=timeout_s)
        try:
            while True:
                try:
                    chunk = await call.read()
                except grpc.aio.AioRpcError as exc:
                    raise self._error(exc, timeout_s) from exc
                if chunk is grpc.aio.EOF:
                    return
                yield chunk.data, chunk.sha256
        finally:
            if not call.done():
                call.cancel()

    async def abort(
        self, request_ids: Sequence[str], reason: str = "aborted by the gateway"
    ) -> None:
        for message in build_aborts(self.runtime, list(request_ids), reason):
            await self._unary(self._probe.Abort, message, self.abort_timeout_s)

    # --- helpers -------------------------------------------------------------------------------

    async def _unary(self, method: Any, message: Any, timeout_s: float | None = None) -> Any:
        timeout = timeout_s or self.rpc_timeout_s
        try:
            return await method(message, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, timeout) from exc

    def _error(self, exc: grpc.aio.AioRpcError, timeout_s: float | None) -> Exception:
        return classify(exc, self.url, timeout_s)
