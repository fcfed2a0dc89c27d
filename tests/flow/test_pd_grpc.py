"""gRPC PD request building: each runtime's PD fields through the installed protobuf classes."""

from __future__ import annotations

import json

from smg_grpc_proto.generated import sglang_scheduler_pb2, vllm_engine_pb2

from smg.flow.pd_grpc import sglang_legs, vllm_decode, vllm_prefill
from smg.pipeline.backends.grpc_contract import SGLANG, VLLM
from smg.pipeline.backends.grpc_replies import ResponseNormaliser
from smg.pipeline.backends.grpc_requests import build_generate
from smg.pipeline.engine_types import EngineRequest, Finished, SamplingParams

REQ = EngineRequest("r1", (1, 2, 3), SamplingParams(max_tokens=20, n=2, logprobs=3), True, "hi")


def test_plain_requests_carry_no_pd_fields() -> None:
    assert not build_generate(SGLANG, REQ).HasField("disaggregated_params")
    assert not build_generate(VLLM, REQ).HasField("kv_transfer_params_json")


def test_sglang_disaggregated_params() -> None:
    req = EngineRequest(
        "r1", (1,), SamplingParams(), False, bootstrap=("10.0.0.5", 8998, 2**31 - 1)
    )
    msg = build_generate(SGLANG, req)
    dp = msg.disaggregated_params
    assert (dp.bootstrap_host, dp.bootstrap_port, dp.bootstrap_room) == (
        "10.0.0.5",
        8998,
        2**31 - 1,
    )
    again = sglang_scheduler_pb2.GenerateRequest.FromString(msg.SerializeToString())
    assert again.disaggregated_params == dp


def test_sglang_legs_use_the_prefill_bootstrap() -> None:
    class W:
        url = "grpc://[::1]:50051"
        bootstrap_port = 8998

    out = sglang_legs(REQ, W(), 7)  # type: ignore[arg-type]
    assert out.bootstrap == ("::1", 8998, 7) and out.sampling == REQ.sampling


def test_sglang_legs_use_a_discovered_port_only_when_none_is_configured() -> None:
    class W:
        url = "grpc://10.0.0.5:50051"
        bootstrap_port: int | None = None

    assert sglang_legs(REQ, W(), 7, 9001).bootstrap == ("10.0.0.5", 9001, 7)  # type: ignore[arg-type]
    W.bootstrap_port = 8998
    assert sglang_legs(REQ, W(), 7, 9001).bootstrap == ("10.0.0.5", 8998, 7)  # type: ignore[arg-type]


def test_vllm_prefill_and_decode_requests() -> None:
    pre = vllm_prefill(REQ)
    assert pre.sampling.max_tokens == 1 and pre.sampling.n == 1 and not pre.stream
    msg = build_generate(VLLM, pre)
    assert msg.sampling_params.max_tokens == 1 and not msg.stream
    assert json.loads(msg.kv_transfer_params_json)["do_remote_decode"] is True
    kv = '{"remote_engine_id":"e","remote_block_ids":[0,1]}'
    dec = build_generate(VLLM, vllm_decode(REQ, kv))
    assert dec.kv_transfer_params_json == kv and dec.sampling_params.max_tokens == 20
    assert dec.sampling_params.n == 2 and dec.stream
    again = vllm_engine_pb2.GenerateRequest.FromString(dec.SerializeToString())
    assert again.kv_transfer_params_json == kv


def test_vllm_prefill_matches_the_nixl_connector() -> None:
    """NIXL (vLLM's `NixlConnectorScheduler.request_finished`) hands the KV off only when the
    prefill finishes length-capped, so an EOS first token must not end it early (the Rust
    gateway's `sanitize_sampling_for_prefill` sets `ignore_eos` too); and the tag carries the
    names vLLM's toy proxy sends."""
    eos = EngineRequest("r1", (1,), SamplingParams(max_tokens=9, stop=("x",)), True)
    msg = build_generate(VLLM, vllm_prefill(eos))
    assert msg.sampling_params.ignore_eos and msg.sampling_params.max_tokens == 1
    assert not msg.sampling_params.stop and msg.request_id == "r1"
    assert json.loads(msg.kv_transfer_params_json) == {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    # the decode leg gets the prefill's params verbatim (remote_request_id, tp_size included)
    kv = json.dumps(
        {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [0, 1],
            "remote_engine_id": "e",
            "remote_request_id": "r1-abc",
            "remote_host": "10.0.0.2",
            "remote_port": 5600,
            "tp_size": 1,
        }
    )
    dec = build_generate(VLLM, vllm_decode(eos, kv))
    assert dec.kv_transfer_params_json == kv and not dec.sampling_params.ignore_eos
    assert dec.request_id == "r1"  # the same id as the prefill leg (NIXL on vLLM < 0.13)


def test_vllm_complete_kv_params_json_and_legacy() -> None:
    norm = ResponseNormaliser(VLLM, stream=False, n=1)
    resp = vllm_engine_pb2.GenerateResponse()
    resp.complete.output_ids.append(5)
    resp.complete.kv_transfer_params_json = '{"remote_block_ids":[3]}'
    ev = norm.feed(resp)
    assert isinstance(ev, Finished) and ev.kv_transfer_params_json == '{"remote_block_ids":[3]}'

    norm = ResponseNormaliser(VLLM, stream=False, n=1)
    resp = vllm_engine_pb2.GenerateResponse()
    resp.complete.kv_transfer_params.remote_host = "h"
    resp.complete.kv_transfer_params.remote_port = 9
    ev = norm.feed(resp)
    assert isinstance(ev, Finished)
    assert json.loads(ev.kv_transfer_params_json or "") == {"remote_host": "h", "remote_port": 9}

    norm = ResponseNormaliser(SGLANG, stream=False, n=1)
    sresp = sglang_scheduler_pb2.GenerateResponse()
    sresp.complete.output_ids.append(5)
    ev = norm.feed(sresp)
    assert isinstance(ev, Finished) and ev.kv_transfer_params_json is None
