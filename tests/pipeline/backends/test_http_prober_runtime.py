"""HttpProber learns a worker's runtime with its model, from `owned_by` in its /v1/models (the
Rust gateway's detection: `sglang`/`nvidia` -> sglang, `vllm` -> vllm, anything else unknown)."""

from __future__ import annotations

from typing import Any

import pytest

from smg.actors.worker import initial_snapshot
from smg.config import CircuitBreakerConfig
from smg.core.circuit_breaker import CircuitBreaker
from smg.pipeline.backends.http_probe import HttpProber


class FakeBackend:
    def __init__(self, owned_by: object) -> None:
        self.models = {"object": "list", "data": [{"id": "m", "owned_by": owned_by}]}

    async def get_json(self, worker: Any, path: str, timeout_s: float) -> tuple[int, object]:
        return (200, self.models) if path == "/v1/models" else (200, None)


@pytest.mark.parametrize(
    ("owned_by", "runtime"),
    [("vllm", "vllm"), ("sglang", "sglang"), ("nvidia", "sglang"), ("smg-sim", None), (3, None)],
)
async def test_runtime_from_owned_by(owned_by: object, runtime: str | None) -> None:
    prober = HttpProber(FakeBackend(owned_by), "/health", 1.0)  # type: ignore[arg-type]
    worker = initial_snapshot(
        "w", "http://w:1", model_id=None, worker_type="regular", api_key=None,
        breaker=CircuitBreaker(CircuitBreakerConfig()),
    )  # fmt: skip
    result = await prober(worker)
    assert (result.ok, result.model_id, result.runtime) == (True, "m", runtime)
