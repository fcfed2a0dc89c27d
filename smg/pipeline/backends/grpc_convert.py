"""Our engine types <-> the vLLM and SGLang protobuf messages of smg-grpc-proto 0.4.28. Pure.

Requests (`build_generate`) and the per-request `ResponseNormaliser`, which turns either runtime's
stream of `GenerateResponse` messages into one shape of `TokenDelta` / `Finished` events.

How the two runtimes differ, and what this module does about it:

* Counts. vLLM's `GenerateStreamChunk.completion_tokens` is the size of that chunk; SGLang's is
  cumulative. Our `TokenDelta.completion_tokens` is always cumulative per choice.
* The final message. Streaming, both servicers send the last chunk and then a `GenerateComplete`
  whose `output_ids` (and logprobs) repeat that chunk; the repeat is dropped, so
  `Finished.token_ids` is empty. vLLM's streaming `GenerateComplete.completion_tokens` is also just
  that chunk's size: the count is carried over from the chunks. Not streaming, there are no chunks
  and `Finished.token_ids` carries every output id.
* Sampling defaults. SGLang's `SamplingParams` has plain (non-optional) numeric fields that its
  servicer passes to the engine as they are: an unset temperature would arrive as 0 (greedy) and
  an unset top_p as 0 (refused). Every SGLang field is therefore sent explicitly with OpenAI's
  default (temperature 1.0, top_p 1.0, top_k -1, min_p 0, repetition_penalty 1.0). vLLM's
  temperature is `optional`: left unset, the servicer uses 1.0 (or the model's default).
* top_k disabled: vLLM 0 (an unsigned field; vLLM reads 0 as "all tokens"), SGLang -1 (SGLang
  refuses 0).
* Structured output: json_schema and regex map to the field of the same name on both, EBNF to
  vLLM's `grammar` / SGLang's `ebnf_grammar`; `json_object` becomes the schema {"type":"object"}
  on both (as the Rust gateway does: an object, not any JSON value).
* Logprobs: vLLM takes a count in `SamplingParams.logprobs`; SGLang takes `return_logprob`,
  `top_logprobs_num` and `logprob_start_len=-1` (output tokens only) on the request. Both answer
  with `OutputLogProbs`; vLLM's top-k lists come in its dict order (the sampled token first), so
  every list is sorted by logprob, best first.
* seed: vLLM's is int32 (our i64 is wrapped to 32 bits, as a Rust `as i32` cast would); SGLang's
  0.4.28 contract has no seed field, so it is not sent.
* include_stop_str_in_output is vLLM's name; SGLang calls it `no_stop_trim`.
* Abort: vLLM takes a list of ids in one call; SGLang one id per call (with a reason).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from smg_grpc_proto.generated import common_pb2, sglang_scheduler_pb2, vllm_engine_pb2

from smg.pipeline.engine_types import (
    EngineModelInfo,
    EngineRequest,
    Finished,
    SamplingParams,
    TokenDelta,
    TokenLogprob,
)

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
JSON_OBJECT_SCHEMA = '{"type":"object"}'


# Every proto field this adapter reads or writes, as "name:type" with the type written as
#   float (scalar), float? (explicit presence: proto3 optional), uint32[] (repeated),
#   map<int32,float>, a message type by name, string|constraint (a member of that oneof).
# tests/test_grpc_contract.py checks each entry against the installed descriptors.
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
    "sampling_params:SamplingParams stream:bool kv_transfer_params_json:string?",
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
    "top_logprobs_num:int32 stream:bool disaggregated_params:DisaggregatedParams",
    (SGLANG, "DisaggregatedParams"): "bootstrap_host:string bootstrap_port:int32 "
    "bootstrap_room:int32",
    (SGLANG, "AbortRequest"): "request_id:string reason:string",
    (SGLANG, "GetModelInfoResponse"): "max_context_length:int32",
    (SGLANG, "GetServerInfoResponse"): "server_args:Struct",
    (SGLANG, "GetLoadsRequest"): "include:string[]",
    (VLLM, "GetLoadsRequest"): "",
    ("common", "GetTokenizerRequest"): "",
    ("common", "GetTokenizerChunk"): "data:bytes sha256:string",
}
# The RPCs the adapter calls, on both services (checked by the contract test too).
USED_METHODS = (
    "Generate",
    "HealthCheck",
    "Abort",
    "GetModelInfo",
    "GetServerInfo",
    "GetLoads",
    "GetTokenizer",
)
USED_FIELDS: dict[tuple[str, str], dict[str, str]] = {
    (runtime, message): _fields(spec)
    for runtime in (VLLM, SGLANG)
    for message, spec in _SHARED.items()
}
for _key, _spec in _PER_RUNTIME.items():
    USED_FIELDS.setdefault(_key, {}).update(_fields(_spec))


# --- requests ----------------------------------------------------------------------------------


def build_generate(runtime: str, req: EngineRequest) -> Any:
    """The runtime's `GenerateRequest` for one of ours."""
    s = req.sampling
    if runtime == VLLM:
        v = vllm_engine_pb2.GenerateRequest(
            request_id=req.request_id,
            tokenized=vllm_engine_pb2.TokenizedInput(
                original_text=req.original_text, input_ids=req.input_ids
            ),
            sampling_params=vllm_sampling(s),
            stream=req.stream,
        )
        if req.kv_transfer_params_json is not None:
            v.kv_transfer_params_json = req.kv_transfer_params_json
        return v
    if runtime == SGLANG:
        g = sglang_scheduler_pb2.GenerateRequest(
            request_id=req.request_id,
            tokenized=sglang_scheduler_pb2.TokenizedInput(
                original_text=req.original_text, input_ids=req.input_ids
            ),
            sampling_params=sglang_sampling(s),
            return_logprob=s.logprobs is not None,
            top_logprobs_num=s.logprobs or 0,
            logprob_start_len=-1,  # output tokens only, no prompt logprobs
            stream=req.stream,
        )
        if req.bootstrap is not None:
            host, port, room = req.bootstrap
            g.disaggregated_params.bootstrap_host = host
            g.disaggregated_params.bootstrap_port = port
            g.disaggregated_params.bootstrap_room = room
        return g
    raise ValueError(f"unknown runtime {runtime!r}")


def vllm_sampling(s: SamplingParams) -> vllm_engine_pb2.SamplingParams:
    p = vllm_engine_pb2.SamplingParams(
        top_p=1.0 if s.top_p is None else s.top_p,
        top_k=0 if s.top_k is None or s.top_k < 0 else s.top_k,
        min_p=s.min_p or 0.0,
        frequency_penalty=s.frequency_penalty or 0.0,
        presence_penalty=s.presence_penalty or 0.0,
        repetition_penalty=1.0 if s.repetition_penalty is None else s.repetition_penalty,
        min_tokens=s.min_tokens,
        stop=s.stop,
        stop_token_ids=s.stop_token_ids,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=True,
        ignore_eos=s.ignore_eos,
        n=s.n,
        include_stop_str_in_output=s.include_stop_str_in_output,
    )
    if s.temperature is not None:
        p.temperature = s.temperature
    if s.max_tokens is not None:
        p.max_tokens = s.max_tokens
    if s.logprobs is not None:
        p.logprobs = s.logprobs
    if s.seed is not None:
        p.seed = wrap_int32(s.seed)
    if s.logit_bias:
        p.logit_bias.update(dict(s.logit_bias))
    if s.json_schema is not None or s.json_object:
        p.json_schema = s.json_schema if s.json_schema is not None else JSON_OBJECT_SCHEMA
    elif s.regex is not None:
        p.regex = s.regex
    elif s.grammar is not None:
        p.grammar = s.grammar
    return p


def sglang_sampling(s: SamplingParams) -> sglang_scheduler_pb2.SamplingParams:
    p = sglang_scheduler_pb2.SamplingParams(
        temperature=1.0 if s.temperature is None else s.temperature,
        top_p=1.0 if s.top_p is None else s.top_p,
        top_k=-1 if s.top_k is None or s.top_k < 0 else s.top_k,
        min_p=s.min_p or 0.0,
        frequency_penalty=s.frequency_penalty or 0.0,
        presence_penalty=s.presence_penalty or 0.0,
        repetition_penalty=1.0 if s.repetition_penalty is None else s.repetition_penalty,
        min_new_tokens=s.min_tokens,
        stop=s.stop,
        stop_token_ids=s.stop_token_ids,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=True,
        ignore_eos=s.ignore_eos,
        no_stop_trim=s.include_stop_str_in_output,
        n=s.n,
    )
    if s.max_tokens is not None:
        p.max_new_tokens = s.max_tokens
    if s.logit_bias:
        p.logit_bias.update({str(k): v for k, v in s.logit_bias})
    if s.json_schema is not None or s.json_object:
        p.json_schema = s.json_schema if s.json_schema is not None else JSON_OBJECT_SCHEMA
    elif s.regex is not None:
        p.regex = s.regex
    elif s.grammar is not None:
        p.ebnf_grammar = s.grammar
    return p


def wrap_int32(value: int) -> int:
    return ((value + 2**31) % 2**32) - 2**31


def build_aborts(runtime: str, request_ids: list[str], reason: str) -> list[Any]:
    """The Abort messages for these ids: one for vLLM, one per id for SGLang."""
    if runtime == VLLM:
        return [vllm_engine_pb2.AbortRequest(request_ids=request_ids)]
    return [sglang_scheduler_pb2.AbortRequest(request_id=r, reason=reason) for r in request_ids]


# --- replies -----------------------------------------------------------------------------------

_FINISH_REASONS = {
    "stop": "stop",
    "eos": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "abort": "abort",
    "cancelled": "abort",
    "error": "error",
}


def finish_reason(raw: str) -> str:
    """An engine's finish reason as one of ours; empty or unknown reasons are a normal stop (both
    servicers default to "stop")."""
    return _FINISH_REASONS.get(raw.lower(), "stop")


def logprobs_from_proto(lp: Any) -> list[TokenLogprob]:
    """`OutputLogProbs` (same shape in both runtimes) -> one record per position."""
    tops = lp.top_logprobs
    out: list[TokenLogprob] = []
    for i, (token_id, value) in enumerate(zip(lp.token_ids, lp.token_logprobs, strict=False)):
        top: tuple[tuple[int, float], ...] = ()
        if i < len(tops):
            alts = zip(tops[i].token_ids, tops[i].values, strict=False)
            top = tuple(sorted(alts, key=lambda pair: -pair[1]))
        out.append(TokenLogprob(token_id, value, top))
    return out


@dataclass(slots=True)
class _Choice:
    delivered: list[int] = field(default_factory=list)  # streamed ids (streaming only)
    last: list[int] = field(default_factory=list)  # the latest chunk's ids
    completion: int = 0
    prompt: int = 0
    cached: int = 0
    done: bool = False


class ResponseNormaliser:
    """The state of one Generate call: feed it each `GenerateResponse`, get our events."""

    __slots__ = ("_choices", "_cumulative", "_done", "_n", "_stream", "_vllm")

    def __init__(self, runtime: str, *, stream: bool, n: int) -> None:
        self._cumulative = runtime == SGLANG  # SGLang counts are cumulative, vLLM's per chunk
        self._vllm = runtime == VLLM
        self._stream = stream
        self._n = max(n, 1)
        self._choices: dict[int, _Choice] = {}
        self._done = 0

    @property
    def all_finished(self) -> bool:
        return self._done >= self._n

    def feed(self, response: Any) -> TokenDelta | Finished | None:
        kind = response.WhichOneof("response")
        if kind == "chunk":
            return self._chunk(response.chunk)
        if kind == "complete":
            return self._complete(response.complete)
        return None

    def fail(self, error: str) -> list[Finished]:
        """`Finished(error)` for every choice not finished yet (the call broke mid-way)."""
        out = []
        for index in sorted(set(range(self._n)) | self._choices.keys()):
            ch = self._choice(index)
            if ch.done:
                continue
            ch.done = True
            self._done += 1
            out.append(
                Finished(
                    index=index,
                    finish_reason="error",
                    prompt_tokens=ch.prompt,
                    completion_tokens=ch.completion,
                    cached_tokens=ch.cached,
                    error=error,
                )
            )
        return out

    def _choice(self, index: int) -> _Choice:
        ch = self._choices.get(index)
        if ch is None:
            ch = self._choices[index] = _Choice()
        return ch

    def _chunk(self, c: Any) -> TokenDelta | None:
        # per token: each protobuf field is read once (a upb getattr is not free)
        index = c.index
        ch = self._choices.get(index)
        if ch is None:
            ch = self._choices[index] = _Choice()
        elif ch.done:
            return None
        ids = list(c.token_ids)
        if self._cumulative:
            ch.completion = c.completion_tokens or ch.completion + len(ids)
        else:  # count the ids themselves: right whether an engine sends per-chunk or running
            ch.completion += len(ids)
        prompt = ch.prompt = c.prompt_tokens or ch.prompt
        cached = ch.cached = c.cached_tokens or ch.cached
        if not ids:
            return None
        if self._stream:
            ch.delivered.extend(ids)
            ch.last = ids
        logprobs = logprobs_from_proto(c.output_logprobs) if c.HasField("output_logprobs") else None
        return TokenDelta(index, ids, prompt, ch.completion, cached, logprobs)

    def _complete(self, c: Any) -> Finished | None:
        ch = self._choice(c.index)
        if ch.done:
            return None
        ids = list(c.output_ids)
        logprobs = logprobs_from_proto(c.output_logprobs) if c.HasField("output_logprobs") else None
        ch.prompt = c.prompt_tokens or ch.prompt
        ch.cached = c.cached_tokens or ch.cached
        if self._stream:
            new = _unseen(ids, ch)
            logprobs = logprobs[-len(new) :] if logprobs and new else None
            if self._cumulative:
                ch.completion = c.completion_tokens or ch.completion + len(new)
            else:  # vLLM's streaming Complete counts only its repeated chunk
                ch.completion += len(new)
        else:
            new = ids
            ch.completion = c.completion_tokens or len(ids)
        ch.done = True
        self._done += 1
        which = c.WhichOneof("matched_stop")
        matched: int | str | None = None
        if which == "matched_token_id":
            matched = c.matched_token_id
        elif which == "matched_stop_str":
            matched = c.matched_stop_str
        reason = finish_reason(c.finish_reason)
        kv_params = None
        if self._vllm:
            kv_params = kv_transfer_params_of(c)
        return Finished(
            index=c.index,
            finish_reason=reason,
            prompt_tokens=ch.prompt,
            completion_tokens=ch.completion,
            cached_tokens=ch.cached,
            token_ids=new,
            matched_stop=matched,
            logprobs=logprobs or None,
            error=f"the engine finished with {c.finish_reason!r}" if reason == "error" else None,
            kv_transfer_params_json=kv_params,
        )


def kv_transfer_params_of(complete: Any) -> str | None:
    """vLLM's `GenerateComplete` KV-transfer params as a JSON object: `kv_transfer_params_json`,
    else the deprecated typed `kv_transfer_params` (Mooncake's remote host and port)."""
    if complete.HasField("kv_transfer_params_json"):
        return str(complete.kv_transfer_params_json)
    if complete.HasField("kv_transfer_params"):
        kv = complete.kv_transfer_params
        return json.dumps({"remote_host": kv.remote_host, "remote_port": kv.remote_port})
    return None


def _unseen(ids: list[int], ch: _Choice) -> list[int]:
    """The ids of a streaming Complete not already delivered as deltas."""
    if not ids or ids == ch.last:
        return []  # the documented repeat of the last chunk
    done = ch.delivered
    if len(ids) >= len(done) and ids[: len(done)] == done:
        return ids[len(done) :]  # a cumulative list: only its unseen tail
    return ids  # tokens that were never streamed


# --- control plane -----------------------------------------------------------------------------


def model_info_from(runtime: str, info: Any, server_info: Any = None) -> EngineModelInfo:
    max_context = int(info.max_context_length) or None
    if max_context is None and server_info is not None and runtime == SGLANG:
        args = server_info.server_args
        if "context_length" in args.fields:
            value = args.fields["context_length"]
            if value.WhichOneof("kind") == "number_value" and value.number_value > 0:
                max_context = int(value.number_value)
    served = info.served_model_name or None
    return EngineModelInfo(
        model_id=served or info.model_path,
        runtime=runtime,
        max_context_length=max_context,
        eos_token_ids=tuple(info.eos_token_ids),
        served_model_name=served,
        tokenizer_path=info.tokenizer_path or None,
    )


def loads_from(response: Any) -> dict[str, Any]:
    """`GetLoadsResponse` summed over DP ranks (token_usage averaged)."""
    loads = list(response.loads)
    ranks = len(loads)
    return {
        "dp_ranks": ranks,
        "running": sum(x.num_running_reqs for x in loads),
        "waiting": sum(x.num_waiting_reqs for x in loads),
        "used_tokens": sum(x.num_used_tokens for x in loads),
        "max_total_tokens": sum(x.max_total_num_tokens for x in loads),
        "token_usage": sum(x.token_usage for x in loads) / ranks if ranks else 0.0,
        "gen_throughput": sum(x.gen_throughput for x in loads),
    }
