"""The tracing seam in-process: a no-op when off, and spans to a real OTLP receiver when on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.otlp_receiver import Receiver, otlp_receiver

from smg import tracing


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    with otlp_receiver() as (rec, endpoint):
        yield rec, endpoint
        tracing.stop()


def test_off_everything_is_a_no_op() -> None:
    assert not tracing.enabled() and not tracing.on
    first, second = tracing.stage("queueing"), tracing.stage("dispatch", "a", "b")
    assert first is second  # one shared object: no span, nothing built per call
    with first as entered, second:  # nested: the shared object is entered twice
        assert entered is None
    with pytest.raises(KeyError, match="through"), first:  # it never swallows an exception
        raise KeyError("through")
    headers: dict[str, str] = {}
    tracing.inject_headers(headers)
    assert headers == {} and tracing.grpc_metadata() == ()
    tracing.annotate("gen_ai.request.model", "m")
    tracing.first_token()


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("localhost:4317", "http://localhost:4317"),
        ("http://otel:4317", "http://otel:4317"),
        ("https://otel:4317", "https://otel:4317"),
    ],
)
def test_endpoint_urls(endpoint: str, url: str) -> None:
    assert tracing.endpoint_url(endpoint) == url


def test_on_a_request_is_one_trace_with_its_stages(receiver: tuple[Receiver, str]) -> None:
    rec, endpoint = receiver
    tracing.start(endpoint)
    assert tracing.on and tracing.enabled()  # the flag the hot callers read follows start/stop
    incoming = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    with tracing.server_span("POST /v1/chat/completions", incoming, {"http.route": "/x"}) as root:
        trace_id, root_id = tracing.ids(root)
        with tracing.stage("dispatch", "server.address", "grpc://e:1"):
            meta = dict(tracing.grpc_metadata())
            headers: dict[str, str] = {}
            tracing.inject_headers(headers)
        tracing.first_token()
    tracing.stop()  # flushes
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert meta["traceparent"].split("-")[1] == trace_id
    assert headers["traceparent"] == meta["traceparent"]
    (dispatch,) = rec.wait_for("dispatch", trace_id=trace_id)
    (first,) = rec.wait_for("time_to_first_token", trace_id=trace_id)
    (server,) = rec.wait_for("POST /v1/chat/completions", trace_id=trace_id)
    assert server.parent_id == "00f067aa0ba902b7" and server.span_id == root_id
    assert dispatch.parent_id == root_id == first.parent_id
    assert meta["traceparent"].split("-")[2] == dispatch.span_id
    assert dispatch.attributes == {"server.address": "grpc://e:1"}
    assert server.service == "smg"
    assert not tracing.enabled() and not tracing.on


def test_the_standard_sampler_variables_are_honoured(
    receiver: tuple[Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, endpoint = receiver
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    tracing.start(endpoint)
    with tracing.server_span("GET /x", {}, {}):
        with tracing.stage("dispatch"):
            (name, value), *_ = tracing.grpc_metadata()
    tracing.stop()
    assert name == "traceparent" and int(value.split("-")[3], 16) & 1 == 0  # not sampled
    assert rec.exports == 0
