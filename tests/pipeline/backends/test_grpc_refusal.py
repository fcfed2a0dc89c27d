"""An engine's refusal before any output, as the runner sees it: try elsewhere (and whether it
counts against the engine's breaker), or the client's error."""

from __future__ import annotations

import pytest

from smg import errors
from smg.core.circuit_breaker import is_failure_kind
from smg.pipeline.backends.grpc_errors import EngineError
from smg.pipeline.backends.grpc_pool import refusal
from smg.pipeline.backends.http import UpstreamError


def test_a_busy_engine_is_tried_elsewhere_without_a_breaker_failure() -> None:
    out = refusal(EngineError("RESOURCE_EXHAUSTED", "queue full"), "grpc://e:1", "id")
    assert isinstance(out, UpstreamError) and out.kind == "busy"
    assert not is_failure_kind(out.kind)


@pytest.mark.parametrize("status", ["UNAVAILABLE", "ABORTED"])
def test_an_unavailable_engine_is_a_failure(status: str) -> None:
    out = refusal(EngineError(status, "down"), "grpc://e:1", "id")
    assert isinstance(out, UpstreamError) and is_failure_kind(out.kind)


def test_a_refused_request_is_the_clients_error() -> None:
    out = refusal(EngineError("INVALID_ARGUMENT", "too long"), "grpc://e:1", "id")
    assert isinstance(out, errors.ApiError) and out.status == 400
