"""The adapter against the installed smg-grpc-proto contract: every field it reads or writes
exists with the type it expects (the list is `grpc_contract.USED_FIELDS`, the one the code uses),
and the requests it builds carry each runtime's encoding of our sampling parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from google.protobuf.descriptor import FieldDescriptor
from smg_grpc_proto.generated import vllm_engine_pb2

from smg.pipeline.backends.grpc_contract import (
    PROTO_MODULES,
    RUNTIME_METHODS,
    SERVICE_NAMES,
    SGLANG,
    USED_FIELDS,
    USED_METHODS,
    VLLM,
)
from smg.pipeline.backends.grpc_requests import (
    build_aborts,
    build_embed,
    build_generate,
    vllm_sampling,
    wrap_int32,
)
from smg.pipeline.engine_types import EngineRequest, SamplingParams

_SCALARS = {
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
}


def _describe(fd: FieldDescriptor) -> str:
    """A descriptor in USED_FIELDS's notation."""
    message = fd.message_type
    if message is not None and message.GetOptions().map_entry:
        key, value = message.fields_by_name["key"], message.fields_by_name["value"]
        return f"map<{_describe(key)},{_describe(value)}>"
    base = message.name if message is not None else _SCALARS[fd.type]
    if fd.is_repeated:
        return base + "[]"
    oneof = fd.containing_oneof
    if oneof is not None and oneof.name == "_" + fd.name:  # proto3 `optional`
        return base + "?"
    if oneof is not None:
        return f"{base}|{oneof.name}"
    return base


CASES = [
    (module, message, name, spec)
    for (module, message), fields in USED_FIELDS.items()
    for name, spec in fields.items()
]


@pytest.mark.parametrize(
    ("module", "message", "name", "spec"), CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_used_field_exists_with_type(module: str, message: str, name: str, spec: str) -> None:
    descriptor = PROTO_MODULES[module].DESCRIPTOR.message_types_by_name[message]
    assert name in descriptor.fields_by_name, f"{module}.{message} has no field {name}"
    assert _describe(descriptor.fields_by_name[name]) == spec


@pytest.mark.parametrize(("module", "message"), sorted(USED_FIELDS))
def test_used_message_exists(module: str, message: str) -> None:
    assert message in PROTO_MODULES[module].DESCRIPTOR.message_types_by_name


@pytest.mark.parametrize("runtime", [VLLM, SGLANG])
def test_services_and_methods(runtime: str) -> None:
    services = PROTO_MODULES[runtime].DESCRIPTOR.services_by_name
    (service,) = [s for s in services.values() if s.full_name == SERVICE_NAMES[runtime]]
    for method in (*USED_METHODS, *RUNTIME_METHODS[runtime]):
        assert method in service.methods_by_name, f"{service.full_name} has no {method}"
    assert service.methods_by_name["Generate"].server_streaming
    assert service.methods_by_name["GetTokenizer"].server_streaming


def _request(**sampling: Any) -> EngineRequest:
    return EngineRequest(
        request_id="r1",
        input_ids=(1, 2, 3),
        sampling=SamplingParams(**sampling),
        stream=True,
        original_text="hi",
    )


def test_vllm_defaults_leave_optional_fields_unset() -> None:
    msg = build_generate(VLLM, _request())
    p = msg.sampling_params
    assert (msg.request_id, list(msg.tokenized.input_ids), msg.stream) == ("r1", [1, 2, 3], True)
    assert msg.tokenized.original_text == "hi"
    for name in ("temperature", "max_tokens", "logprobs", "seed"):
        assert not p.HasField(name), name  # the engine's own default applies
    assert (p.top_p, p.top_k, p.repetition_penalty, p.n) == (1.0, 0, 1.0, 1)
    assert p.skip_special_tokens and p.spaces_between_special_tokens
    assert p.WhichOneof("constraint") is None


def test_sglang_defaults_are_explicit() -> None:
    msg = build_generate(SGLANG, _request())
    p = msg.sampling_params
    # SGLang reads plain floats: unset would be temperature 0 (greedy) and top_p 0 (refused)
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty) == (
        1.0,
        1.0,
        -1,
        0.0,
        1.0,
    )
    assert not p.HasField("max_new_tokens")
    assert (msg.return_logprob, msg.top_logprobs_num, msg.logprob_start_len) == (False, 0, -1)


FULL = dict(
    temperature=0.0,
    top_p=0.9,
    top_k=40,
    min_p=0.05,
    max_tokens=64,
    min_tokens=2,
    stop=("x", "y"),
    stop_token_ids=(7, 8),
    n=2,
    seed=2**31 + 5,
    presence_penalty=0.5,
    frequency_penalty=-0.5,
    repetition_penalty=1.1,
    logprobs=3,
    ignore_eos=True,
    skip_special_tokens=False,
    include_stop_str_in_output=True,
    logit_bias=((5, 1.5), (9, -2.0)),
)


def test_vllm_full_mapping() -> None:
    p = build_generate(VLLM, _request(**FULL)).sampling_params
    assert p.HasField("temperature") and p.temperature == 0.0  # explicit greedy stays greedy
    assert (p.top_k, p.max_tokens, p.min_tokens, p.n, p.logprobs) == (40, 64, 2, 2, 3)
    assert p.seed == wrap_int32(2**31 + 5) == -(2**31) + 5
    assert (list(p.stop), list(p.stop_token_ids)) == (["x", "y"], [7, 8])
    assert p.ignore_eos and p.include_stop_str_in_output and not p.skip_special_tokens
    assert dict(p.logit_bias) == {5: 1.5, 9: -2.0}
    assert p.min_p == pytest.approx(0.05) and p.repetition_penalty == pytest.approx(1.1)


def test_sglang_full_mapping() -> None:
    msg = build_generate(SGLANG, _request(**FULL))
    p = msg.sampling_params
    assert p.temperature == 0.0 and p.top_k == 40
    assert (p.max_new_tokens, p.min_new_tokens, p.n) == (64, 2, 2)
    assert p.no_stop_trim and p.ignore_eos and not p.skip_special_tokens
    assert dict(p.logit_bias) == {"5": 1.5, "9": -2.0}
    assert (msg.return_logprob, msg.top_logprobs_num) == (True, 3)
    assert "seed" not in p.DESCRIPTOR.fields_by_name  # not in the 0.4.28 contract: not sent


@pytest.mark.parametrize(
    ("sampling", "vllm", "sglang"),
    [
        ({"json_schema": '{"a":1}'}, ("json_schema", '{"a":1}'), ("json_schema", '{"a":1}')),
        ({"json_object": True}, ("json_schema", None), ("json_schema", None)),
        ({"regex": "[0-9]+"}, ("regex", "[0-9]+"), ("regex", "[0-9]+")),
        ({"grammar": "root ::= x"}, ("grammar", "root ::= x"), ("ebnf_grammar", "root ::= x")),
    ],
)
def test_constraints(
    sampling: dict[str, Any], vllm: tuple[str, str | None], sglang: tuple[str, str | None]
) -> None:
    for runtime, (field, value) in ((VLLM, vllm), (SGLANG, sglang)):
        p = build_generate(runtime, _request(**sampling)).sampling_params
        assert p.WhichOneof("constraint") == field
        got = getattr(p, field)
        if value is None:  # json_object: any JSON object
            assert orjson.loads(got) == {"type": "object"}
        else:
            assert got == value


def test_top_k_disabled_spelling() -> None:
    for top_k in (None, -1):
        assert build_generate(VLLM, _request(top_k=top_k)).sampling_params.top_k == 0
        assert build_generate(SGLANG, _request(top_k=top_k)).sampling_params.top_k == -1


def test_aborts() -> None:
    (v,) = build_aborts(VLLM, ["a", "b"], "why")
    assert list(v.request_ids) == ["a", "b"]
    s = build_aborts(SGLANG, ["a", "b"], "why")
    assert [(m.request_id, m.reason) for m in s] == [("a", "why"), ("b", "why")]


def test_unknown_runtime() -> None:
    with pytest.raises(ValueError):
        build_generate("trtllm", _request())


def test_adapter_and_rank_fields() -> None:
    req = dataclasses.replace(_request(), lora_id="lora-a-id", dp_rank=2)
    g = build_generate(SGLANG, req)
    assert (g.lora_id, g.data_parallel_rank) == ("lora-a-id", 2)
    v = build_generate(VLLM, req)  # vLLM's contract names no adapter
    assert v.HasField("data_parallel_rank") and v.data_parallel_rank == 2
    assert not build_generate(VLLM, _request()).HasField("data_parallel_rank")
    assert build_generate(SGLANG, _request()).lora_id == ""
    e = build_embed(SGLANG, "r", [1, 2], "hi", 1)
    assert (e.data_parallel_rank, list(e.tokenized.input_ids)) == (1, [1, 2])
    assert list(build_embed(VLLM, "r", [3], "", 1).tokenized.input_ids) == [3]


def _vllm_every_field(s: SamplingParams) -> bytes:
    """vLLM's SamplingParams with every plain field given, zeros included (the mapping as it
    was before `vllm_sampling` set only the non-zero ones)."""
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
    return bytes(p.SerializeToString(deterministic=True))


@pytest.mark.parametrize(
    "fields",
    [
        {},
        FULL,
        {"min_p": 0.0, "frequency_penalty": -0.0, "presence_penalty": 0.0, "top_k": 0},
        {"top_k": -1, "min_tokens": 0, "stop": (), "n": 1, "skip_special_tokens": False},
        {"temperature": 0.7, "top_p": 0.0, "repetition_penalty": 0.0, "stop": ("",)},
    ],
)
def test_vllm_sampling_bytes_match_the_every_field_mapping(fields: dict[str, Any]) -> None:
    """Setting only the non-zero plain fields sends the very bytes setting all of them did."""
    s = SamplingParams(**fields)
    got = vllm_sampling(s).SerializeToString(deterministic=True)
    assert got == _vllm_every_field(s)
