"""smg.metrics.exposition.merge: several workers' expositions as one valid exposition."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from smg.metrics.exposition import merge, status_family

pytestmark = pytest.mark.unit

VLLM = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# HELP vllm:e2e_request_latency_seconds Latency.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 2
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4
vllm:e2e_request_latency_seconds_count{model_name="m"} 4
vllm:e2e_request_latency_seconds_sum{model_name="m"} 5.5
plain_total 7
garbage line without a value
"""


def families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.name, s.labels, s.value) for s in fam.samples]
    return out


def test_two_workers_become_one_family_each_labelled_by_worker() -> None:
    text = merge([("http://a:1", VLLM), ("http://b:2", VLLM)])
    assert text.count("# TYPE vllm_num_requests_running gauge") == 1
    fams = families(text)  # the strict parser accepts it: families are contiguous
    running = fams["vllm_num_requests_running"]
    assert {s[1]["worker_addr"] for s in running} == {"http://a:1", "http://b:2"}
    assert all(s[1]["model_name"] == "m" for s in running)
    hist = fams["vllm_e2e_request_latency_seconds"]
    assert len(hist) == 8 and {s[1]["worker_addr"] for s in hist} == {"http://a:1", "http://b:2"}
    assert "garbage" not in text


def test_a_hostile_address_is_escaped_and_nothing_merged_is_empty() -> None:
    text = merge([('http://x"y\\z', "up 1\n")])
    (sample,) = families(text)["up"]
    assert sample[1]["worker_addr"] == 'http://x"y\\z'
    assert merge([]) == ""


def test_failures_are_reported_as_a_gauge() -> None:
    fams = families(status_family([("http://a:1", True), ("http://b:2", False)]))
    got = {s[1]["worker_addr"]: s[2] for s in fams["smg_engine_metrics_scrape_success"]}
    assert got == {"http://a:1": 1.0, "http://b:2": 0.0}
