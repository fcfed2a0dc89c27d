"""OpenTelemetry tracing and request-scoped logs end to end (issue 14).

A real OTLP collector (tests/support/otlp_receiver.py, the `TraceService/Export` gRPC service)
receives the gateway's spans: one server span per request with its stage spans as children, one
trace id, the engine's and the HTTP worker's `traceparent` naming that trace; an incoming
`traceparent` is continued; with tracing off nothing is sent; a collector that is down costs the
requests nothing. With `--log-dir`, the request's lines in the day's file carry its request id
and trace id.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.otlp_receiver import Receiver, Span, otlp_receiver
from support.ports import free_port

from .conftest import Engine, Gateway, Launcher, Sim, wait_until

MSGS = [{"role": "user", "content": "SIM_REPLY: one two three four"}]
CHAT_ROOT = "POST /v1/chat/completions"


@dataclass
class Traced:
    gw: Gateway
    engine: Engine
    sim: Sim
    receiver: Receiver
    log_dir: Path


@pytest.fixture(scope="module")
def traced(module_launch: Launcher, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    log_dir = tmp_path_factory.mktemp("logs")
    with otlp_receiver() as (receiver, endpoint):
        engine = module_launch.start_engine("sim-model", "vllm", chunk_tokens=1)
        sim = module_launch.sim("http-model")
        engine = module_launch.wait_engine(engine)
        gw = module_launch.gateway(
            [engine, sim],
            enable_trace=True,
            otlp_traces_endpoint=endpoint,
            log_dir=log_dir,
            log_json=True,
            log_level="debug",
        )
        yield Traced(gw, engine, sim, receiver, log_dir)


def children(receiver: Receiver, root: Span) -> dict[str, Span]:
    return {s.name: s for s in receiver.trace(root.trace_id) if s.parent_id == root.span_id}


def wait_children(receiver: Receiver, root: Span, names: set[str]) -> dict[str, Span]:
    deadline = time.monotonic() + 10
    while True:
        kids = children(receiver, root)
        if names <= kids.keys() or time.monotonic() > deadline:
            return kids
        time.sleep(0.05)


def traceparent_trace_id(header: str) -> str:
    version, trace_id, span_id, flags = header.split("-")
    assert version == "00" and len(trace_id) == 32 and len(span_id) == 16
    assert int(flags, 16) & 1  # sampled
    return trace_id


def test_streamed_chat_in_grpc_mode_is_one_trace_down_to_the_engine(traced: Traced) -> None:
    with traced.gw.client() as client:
        chunks = list(
            client.chat.completions.create(
                model="sim-model", messages=MSGS, max_tokens=4, stream=True
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    root = traced.receiver.wait_for(CHAT_ROOT)[-1]  # the module's first chat request
    assert root.parent_id == "" and root.service == "smg"
    assert root.attributes["http.route"] == "/v1/chat/completions"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["gen_ai.request.model"] == "sim-model"
    assert root.attributes["smg.worker.url"] == traced.engine.url
    stages = {
        "queueing",
        "template_tokenize",
        "select_worker",
        "dispatch",
        "time_to_first_token",
        "stream",
    }
    kids = wait_children(traced.receiver, root, stages)
    assert stages <= kids.keys(), kids.keys()
    assert {s.trace_id for s in kids.values()} == {root.trace_id}
    # no prompt, key or header in any attribute
    for span in [root, *kids.values()]:
        assert "SIM_REPLY" not in json.dumps(span.attributes)
    # the engine got the dispatch span's context in its gRPC metadata
    seen = traced.engine.stats()["last_traceparent"]
    assert traceparent_trace_id(seen) == root.trace_id
    assert seen.split("-")[2] == kids["dispatch"].span_id


def test_http_worker_gets_the_traceparent(traced: Traced) -> None:
    with traced.gw.client() as client:
        chunks = list(
            client.chat.completions.create(
                model="http-model", messages=MSGS, max_tokens=4, stream=True
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    seen = traced.sim.stats()["last_traceparent"]
    trace_id = traceparent_trace_id(seen)
    (root,) = traced.receiver.wait_for(CHAT_ROOT, trace_id=trace_id)  # the worker's is ours
    assert root.parent_id == "" and root.attributes["smg.worker.url"] == traced.sim.url
    stages = {"queueing", "select_worker", "dispatch", "time_to_first_token", "stream"}
    kids = wait_children(traced.receiver, root, stages)
    assert stages <= kids.keys(), kids.keys()
    assert "template_tokenize" not in kids  # passed through: nothing tokenized
    assert seen.split("-")[2] == kids["dispatch"].span_id


def test_an_incoming_traceparent_is_continued(traced: Traced) -> None:
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = traced.gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sim-model", "messages": MSGS, "max_tokens": 2},
        headers={"traceparent": f"00-{trace_id}-{parent}-01", "tracestate": "vendor=x"},
    )
    assert r.status == 200, r
    (root,) = traced.receiver.wait_for(CHAT_ROOT, trace_id=trace_id)
    assert root.parent_id == parent
    assert traceparent_trace_id(traced.engine.stats()["last_traceparent"]) == trace_id


def test_every_log_line_of_a_request_names_it_and_its_trace(traced: Traced) -> None:
    r = traced.gw.request(
        "POST",
        "/v1/chat/completions",
        {"model": "sim-model", "messages": MSGS, "max_tokens": 2},
        headers={"X-Request-Id": "trace-log-check-1"},
    )
    assert r.status == 200, r
    today = f"smg.{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"
    path = traced.log_dir / today
    deadline = time.monotonic() + 5
    while True:
        lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        mine = [x for x in lines if x.get("request_id") == "trace-log-check-1"]
        if len(mine) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [x["event"] for x in mine] == ["request_started", "request_finished"], mine
    trace_ids = {x.get("trace_id") for x in mine}
    assert len(trace_ids) == 1 and None not in trace_ids
    (trace_id,) = trace_ids
    (root,) = traced.receiver.wait_for(CHAT_ROOT, trace_id=trace_id)
    assert root.attributes["http.response.status_code"] == 200
    assert any(x.get("event") == "gateway_started" or "request_id" not in x for x in lines)


def test_tracing_off_sends_nothing_and_adds_no_traceparent(launch: Launcher) -> None:
    with otlp_receiver() as (receiver, endpoint):
        sim = launch.sim("http-model")
        gw = launch.gateway([sim], otlp_traces_endpoint=endpoint)
        with gw.client() as client:
            client.chat.completions.create(model="http-model", messages=MSGS, max_tokens=2)
        assert sim.stats()["last_traceparent"] == ""
        time.sleep(1.5)  # three of the exporter's batch delays, had it been on
        assert receiver.exports == 0 and receiver.names() == []


def test_a_collector_that_is_down_costs_requests_nothing(launch: Launcher) -> None:
    closed = free_port()  # nothing listens there
    sim = launch.sim("http-model")
    gw = launch.gateway([sim], enable_trace=True, otlp_traces_endpoint=f"127.0.0.1:{closed}")
    took = []
    with gw.client(timeout_s=5) as client:
        for _ in range(20):
            start = time.monotonic()
            done = client.chat.completions.create(model="http-model", messages=MSGS, max_tokens=2)
            took.append(time.monotonic() - start)
            assert done.choices[0].message.content
    assert max(took) < 1.0, took
    assert traceparent_trace_id(sim.stats()["last_traceparent"])
    with urllib.request.urlopen(gw.url + "/health", timeout=2) as r:
        assert r.status == 200
    assert gw.proc.alive


def test_a_pd_pair_over_grpc_gets_one_trace_on_both_legs(launch: Launcher) -> None:
    with otlp_receiver() as (receiver, endpoint):
        prefill = launch.engine(runtime="sglang", role="prefill", bootstrap_port=8998)
        decode = launch.engine(runtime="sglang", role="decode")
        gw = launch.gateway(
            prefill=[(prefill, 8998)],
            decode=[decode],
            enable_trace=True,
            otlp_traces_endpoint=endpoint,
        )
        with gw.client() as client:
            chunks = list(
                client.chat.completions.create(
                    model="sim-model", messages=MSGS, max_tokens=3, stream=True
                )
            )
        assert chunks

        # SGLang's prefill leg runs beside the decode stream: it may reach its engine after the
        # client has its answer, so wait for both legs, do not read them at once
        def both_legs() -> dict[str, str] | None:
            seen = {e.proc.name: e.stats()["last_traceparent"] for e in (prefill, decode)}
            return seen if all(seen.values()) else None

        seen = wait_until(both_legs, 5.0, "both legs on their engines")
        trace_ids = {traceparent_trace_id(v) for v in seen.values()}
        assert len(trace_ids) == 1
        (trace_id,) = trace_ids
        (root,) = receiver.wait_for(CHAT_ROOT, trace_id=trace_id)
        names = {"select_worker", "dispatch_prefill", "dispatch_decode", "stream"}
        kids = wait_children(receiver, root, names)
        assert names <= kids.keys(), kids.keys()
        assert seen[prefill.proc.name].split("-")[2] == kids["dispatch_prefill"].span_id
        assert seen[decode.proc.name].split("-")[2] == kids["dispatch_decode"].span_id


def test_a_provider_worker_gets_the_traceparent(launch: Launcher) -> None:
    with otlp_receiver() as (receiver, endpoint):
        vendor = launch.provider("anthropic", "claude-x", provider_keys=["sk-worker"])
        gw = launch.gateway(
            [vendor],
            backend="anthropic",
            worker_api_key="sk-worker",
            enable_trace=True,
            otlp_traces_endpoint=endpoint,
        )
        with gw.client() as client:
            done = client.chat.completions.create(model="claude-x", messages=MSGS, max_tokens=4)
        assert done.choices[0].message.content
        r = urllib.request.urlopen(vendor.url + "/sim/last-trace", timeout=2)
        trace_id = traceparent_trace_id(json.loads(r.read())["traceparent"])
        (root,) = receiver.wait_for(CHAT_ROOT, trace_id=trace_id)
        assert root.attributes["http.response.status_code"] == 200
        assert "sk-worker" not in json.dumps(root.attributes)
