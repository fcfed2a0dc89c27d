"""`GET /engine_metrics`: two simulated vLLM workers' own series in one scrape, each sample
labelled with its worker's address; a worker that does not answer is reported (scrape success
0), not an error."""

from __future__ import annotations

import pytest

from .conftest import Launcher, free_port, parse_metrics

pytestmark = pytest.mark.integration


def test_engine_metrics_merges_the_workers_and_reports_the_dead_one(launch: Launcher) -> None:
    a, b = launch.sims("em-model", "em-model")
    dead = f"http://127.0.0.1:{free_port()}"
    gw = launch.gateway([a, b, dead], ready=2)
    with gw.client() as client:
        client.chat.completions.create(
            model="em-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    r = gw.request("GET", "/engine_metrics")
    assert r.status == 200, r
    text = r.body.decode()
    assert text.count("# TYPE vllm_request_success_total counter") == 1  # one family, merged
    samples = parse_metrics(text)
    done = {lab["worker_addr"]: v for n, lab, v in samples if n == "vllm_request_success_total"}
    assert set(done) == {a.url, b.url}
    assert sum(done.values()) == 1  # the one chat, answered by one of them
    ok = {
        lab["worker_addr"]: v for n, lab, v in samples if n == "smg_engine_metrics_scrape_success"
    }
    assert ok == {a.url: 1.0, b.url: 1.0, dead: 0.0}
