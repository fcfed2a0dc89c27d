"""A real OTLP trace collector for tests: a gRPC server implementing
`opentelemetry.proto.collector.trace.v1.TraceService/Export` that keeps the spans it receives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from support.ports import free_port


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_id: str  # "" for a root span
    attributes: dict[str, object]
    service: str


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.exports = 0
        self._lock = threading.Lock()

    def Export(self, request, context):  # type: ignore[no-untyped-def]
        got: list[Span] = []
        for rs in request.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"),
                "",
            )
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: _value(a.value) for a in s.attributes}
                    got.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attrs,
                            service,
                        )
                    )
        with self._lock:
            self.spans += got
            self.exports += 1
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(
        self, name: str, count: int = 1, timeout_s: float = 10.0, trace_id: str | None = None
    ) -> list[Span]:
        """The spans named `name` (of `trace_id`'s trace if given), once there are `count` of
        them (AssertionError at timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                found = [s for s in self.spans if s.name == name and trace_id in (None, s.trace_id)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no {count} span(s) {name!r}: got {self.names()}")
            time.sleep(0.05)

    def names(self) -> list[str]:
        with self._lock:
            return [s.name for s in self.spans]

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]


def _value(v: object) -> object:
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(v, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[tuple[Receiver, str]]:
    """A running receiver and its `host:port` endpoint."""
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield receiver, f"127.0.0.1:{port}"
    finally:
        server.stop(0)
