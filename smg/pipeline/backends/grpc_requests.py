"""Our `EngineRequest` -> the vLLM or SGLang request messages of smg-grpc-proto 0.4.28. Pure.

How the two runtimes differ on the way in, and what this module does about it:

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
  `top_logprobs_num` and `logprob_start_len=-1` (output tokens only) on the request.
* seed: vLLM's is int32 (our i64 is wrapped to 32 bits, as a Rust `as i32` cast would); SGLang's
  0.4.28 contract has no seed field, so it is not sent.
* include_stop_str_in_output is vLLM's name; SGLang calls it `no_stop_trim`.
* Abort: vLLM takes a list of ids in one call; SGLang one id per call (with a reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smg_grpc_proto.generated import sglang_scheduler_pb2, vllm_engine_pb2

from smg.pipeline.backends.grpc_contract import SGLANG, VLLM
from smg.pipeline.engine_types import EngineRequest, SamplingParams

JSON_OBJECT_SCHEMA = '{"type":"object"}'


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
        if req.dp_rank is not None:
            v.data_parallel_rank = req.dp_rank
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
        if req.lora_id is not None:
            g.lora_id = req.lora_id
        if req.dp_rank is not None:
            g.data_parallel_rank = req.dp_rank
        return g
    raise ValueError(f"unknown runtime {runtime!r}")


def vllm_sampling(s: SamplingParams) -> vllm_engine_pb2.SamplingParams:
    # Only the fields that differ from proto3's zero values are set: none of these has
    # presence, so a zero is not sent either way, and each keyword set costs ~0.3 µs.
    p = vllm_engine_pb2.SamplingParams(
        top_p=1.0 if s.top_p is None else s.top_p,
        repetition_penalty=1.0 if s.repetition_penalty is None else s.repetition_penalty,
        skip_special_tokens=s.skip_special_tokens,
        spaces_between_special_tokens=True,
        n=s.n,
    )
    if s.top_k is not None and s.top_k > 0:
        p.top_k = s.top_k
    if s.min_p:
        p.min_p = s.min_p
    if s.frequency_penalty:
        p.frequency_penalty = s.frequency_penalty
    if s.presence_penalty:
        p.presence_penalty = s.presence_penalty
    if s.min_tokens:
        p.min_tokens = s.min_tokens
    if s.stop:
        p.stop.extend(s.stop)
    if s.stop_token_ids:
        p.stop_token_ids.extend(s.stop_token_ids)
    if s.ignore_eos:
        p.ignore_eos = True
    if s.include_stop_str_in_output:
        p.include_stop_str_in_output = True
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


def build_embed(
    runtime: str, request_id: str, input_ids: Sequence[int], text: str, dp_rank: int | None = None
) -> Any:
    """The runtime's `EmbedRequest` for one tokenized input (both runtimes take the same three
    fields; SGLang's other ones, cross-encoder and multimodal, are left unset). The rank goes
    where the contract has a field for it (SGLang's; vLLM's Embed has none)."""
    pb: Any = vllm_engine_pb2 if runtime == VLLM else sglang_scheduler_pb2
    if runtime not in (VLLM, SGLANG):
        raise ValueError(f"unknown runtime {runtime!r}")
    message = pb.EmbedRequest(
        request_id=request_id,
        tokenized=pb.TokenizedInput(original_text=text, input_ids=input_ids),
    )
    if dp_rank is not None and runtime == SGLANG:
        message.data_parallel_rank = dp_rank
    return message
