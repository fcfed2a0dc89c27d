"""`/readiness` from a registry snapshot: the Rust gateway's shape and reasons, and in IGW mode
each model's readiness (PD models need both roles)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from smg.core.readiness import readiness


@dataclass(frozen=True)
class W:
    model_id: str | None
    healthy: bool = True
    worker_type: str = "regular"


def test_single_model_mode_is_the_rust_shape() -> None:
    assert readiness([W("m"), W("m", False)], pd_mode=False, igw=False, draining=False) == (
        200,
        {"status": "ready", "healthy_workers": 1, "total_workers": 2},
    )
    assert readiness([W("m", False)], pd_mode=False, igw=False, draining=False) == (
        503,
        {"status": "not ready", "reason": "insufficient healthy workers"},
    )
    assert readiness([], pd_mode=False, igw=True, draining=True) == (
        503,
        {"status": "not ready", "reason": "draining"},
    )


def test_igw_reports_each_model() -> None:
    workers = [W("a"), W("a", False), W("b", False), W(None, False)]
    status, body = readiness(workers, pd_mode=False, igw=True, draining=False)
    assert status == 200
    assert body == {
        "status": "ready",
        "healthy_workers": 1,
        "total_workers": 4,
        "models": {
            "a": {"ready": True, "healthy_workers": 1, "total_workers": 2},
            "b": {"ready": False, "healthy_workers": 0, "total_workers": 1},
        },
    }
    status, body = readiness(workers[2:], pd_mode=False, igw=True, draining=False)
    assert status == 503 and body["reason"] == "insufficient healthy workers"
    assert body["models"] == {"b": {"ready": False, "healthy_workers": 0, "total_workers": 1}}


@pytest.mark.parametrize("igw", [False, True])
def test_pd_needs_a_healthy_prefill_and_decode(igw: bool) -> None:
    p, d = W("a", worker_type="prefill"), W("a", worker_type="decode")
    status, body = readiness([p], pd_mode=True, igw=igw, draining=False)
    assert (status, body["reason"]) == (503, "no healthy decode worker")
    assert readiness([p, d], pd_mode=True, igw=igw, draining=False)[0] == 200


def test_igw_pd_a_model_with_half_a_pair_is_not_ready() -> None:
    """Model a has only a prefill, model b only a decode: no model can serve."""
    workers = [W("a", worker_type="prefill"), W("b", worker_type="decode")]
    status, body = readiness(workers, pd_mode=True, igw=True, draining=False)
    assert status == 503
    assert {m: v["ready"] for m, v in body["models"].items()} == {"a": False, "b": False}
    workers.append(W("b", worker_type="prefill"))
    status, body = readiness(workers, pd_mode=True, igw=True, draining=False)
    assert status == 200 and body["models"]["b"]["ready"] and not body["models"]["a"]["ready"]
