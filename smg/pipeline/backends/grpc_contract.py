"""The engine runtimes the gRPC adapter speaks to, and the part of their smg-grpc-proto 0.4.28
contract it uses. Pure.

`grpc_requests` builds each runtime's requests and `grpc_replies` normalises its replies; this
module names the runtimes, their services and generated modules, and lists every field and RPC
the two of them touch (`USED_FIELDS`, `USED_METHODS`), which
tests/pipeline/backends/test_grpc_contract.py checks against the installed descriptors.
"""

from __future__ import annotations

from typing import Any

from smg_grpc_proto.generated import common_pb2, sglang_scheduler_pb2, vllm_engine_pb2

VLLM = "vllm"
SGLANG = "sglang"
# Runtime detection order when the caller does not name one: SGLang first (the Rust gateway's
# default backend), then vLLM; the wrong service answers UNIMPLEMENTED.
DETECTION_ORDER = (SGLANG, VLLM)
SERVICE_NAMES = {
    VLLM: "vllm.grpc.engine.VllmEngine",
    SGLANG: "sglang.grpc.scheduler.SglangScheduler",
}
PROTO_MODULES: dict[str, Any] = {
    VLLM: vllm_engine_pb2,
    SGLANG: sglang_scheduler_pb2,
    "common": common_pb2,
}


# Every proto field this adapter reads or writes, as "name:type" with the type written as
#   float (scalar), float? (explicit presence: proto3 optional), uint32[] (repeated),
#   map<int32,float>, a message type by name, string|constraint (a member of that oneof).
# tests/pipeline/backends/test_grpc_contract.py checks each entry against the installed descriptors.
def _fields(spec: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in spec.split())


_SHARED = {
    "GenerateResponse": "chunk:GenerateStreamChunk|response complete:GenerateComplete|response",
    "GenerateStreamChunk": "token_ids:uint32[] prompt_tokens:uint32 completion_tokens:uint32 "
    "cached_tokens:uint32 output_logprobs:OutputLogProbs index:uint32",
    "GenerateComplete": "output_ids:uint32[] finish_reason:string prompt_tokens:uint32 "
    "completion_tokens:uint32 cached_tokens:uint32 output_logprobs:OutputLogProbs index:uint32 "
    "matched_token_id:uint32|matched_stop matched_stop_str:string|matched_stop",
    "OutputLogProbs": "token_logprobs:float[] token_ids:uint32[] top_logprobs:TopLogProbs[]",
    "TopLogProbs": "values:float[] token_ids:uint32[]",
    "TokenizedInput": "original_text:string input_ids:uint32[]",
    "EmbedRequest": "request_id:string tokenized:TokenizedInput",
    "EmbedResponse": "embedding:float[] prompt_tokens:uint32 embedding_dim:uint32",
    "HealthCheckRequest": "",
    "HealthCheckResponse": "healthy:bool",
    "GetModelInfoRequest": "",
    "GetServerInfoRequest": "",
    "GetModelInfoResponse": "model_path:string served_model_name:string tokenizer_path:string "
    "eos_token_ids:int32[]",
    "GetLoadsResponse": "loads:SchedulerLoad[]",
    "SchedulerLoad": "num_running_reqs:int32 num_waiting_reqs:int32 num_used_tokens:int32 "
    "max_total_num_tokens:int32 token_usage:double gen_throughput:double",
}
_PER_RUNTIME = {
    (VLLM, "SamplingParams"): "temperature:float? top_p:float top_k:uint32 min_p:float "
    "frequency_penalty:float presence_penalty:float repetition_penalty:float max_tokens:uint32? "
    "min_tokens:uint32 stop:string[] stop_token_ids:uint32[] skip_special_tokens:bool "
    "spaces_between_special_tokens:bool ignore_eos:bool n:uint32 logprobs:int32? seed:int32? "
    "include_stop_str_in_output:bool logit_bias:map<int32,float> json_schema:string|constraint "
    "regex:string|constraint grammar:string|constraint",
    (VLLM, "GenerateRequest"): "request_id:string tokenized:TokenizedInput|input "
    "sampling_params:SamplingParams stream:bool kv_transfer_params_json:string? "
    "data_parallel_rank:int32?",
    (VLLM, "GenerateComplete"): "kv_transfer_params_json:string? "
    "kv_transfer_params:KvTransferParams",
    (VLLM, "KvTransferParams"): "remote_host:string remote_port:uint32",
    (VLLM, "AbortRequest"): "request_ids:string[]",
    (VLLM, "GetModelInfoResponse"): "max_context_length:uint32",
    (SGLANG, "SamplingParams"): "temperature:float top_p:float top_k:int32 min_p:float "
    "frequency_penalty:float presence_penalty:float repetition_penalty:float "
    "max_new_tokens:uint32? min_new_tokens:uint32 stop:string[] stop_token_ids:uint32[] "
    "skip_special_tokens:bool spaces_between_special_tokens:bool ignore_eos:bool "
    "no_stop_trim:bool n:uint32 logit_bias:map<string,float> json_schema:string|constraint "
    "regex:string|constraint ebnf_grammar:string|constraint",
    (SGLANG, "GenerateRequest"): "request_id:string tokenized:TokenizedInput "
    "sampling_params:SamplingParams return_logprob:bool logprob_start_len:int32 "
    "top_logprobs_num:int32 stream:bool disaggregated_params:DisaggregatedParams lora_id:string "
    "data_parallel_rank:int32?",
    (SGLANG, "DisaggregatedParams"): "bootstrap_host:string bootstrap_port:int32 "
    "bootstrap_room:int32",
    (SGLANG, "AbortRequest"): "request_id:string reason:string",
    (SGLANG, "ListLoadedLoRAAdaptersRequest"): "",
    (SGLANG, "ListLoadedLoRAAdaptersResponse"): "loaded_adapters:LoadedLoRAAdapter[]",
    (SGLANG, "LoadedLoRAAdapter"): "lora_id:string lora_name:string",
    (SGLANG, "GetModelInfoResponse"): "max_context_length:int32",
    (SGLANG, "GetServerInfoResponse"): "server_args:Struct",
    (VLLM, "GetServerInfoResponse"): "data_parallel_size:int32",
    (SGLANG, "EmbedRequest"): "data_parallel_rank:int32",
    (SGLANG, "GetLoadsRequest"): "include:string[]",
    (VLLM, "GetLoadsRequest"): "",
    ("common", "GetTokenizerRequest"): "",
    ("common", "GetTokenizerChunk"): "data:bytes sha256:string",
}
# The RPCs the adapter calls, on both services (checked by the contract test too).
USED_METHODS = (
    "Generate",
    "Embed",
    "HealthCheck",
    "Abort",
    "GetModelInfo",
    "GetServerInfo",
    "GetLoads",
    "GetTokenizer",
)
# The RPCs the adapter calls where the runtime has them (SGLang's LoRA adapter list)
RUNTIME_METHODS = {SGLANG: ("ListLoadedLoRAAdapters",), VLLM: ()}
USED_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    (runtime, message): _fields(spec)
    for runtime in (VLLM, SGLANG)
    for message, spec in _SHARED.items()
}
for _key, _spec in _PER_RUNTIME.items():
    USED_FIELDS.setdefault(_key, {}).update(_fields(_spec))
