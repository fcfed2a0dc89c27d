"""deploy/grafana/smg.json: every metric the dashboard queries is one that smg's /metrics serves.
The names come from a gateway started in-process (a mesh node on loopback, so the mesh series are
there too) and rendered the way its /metrics listener renders them."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from smg.config import GatewayConfig, replace_path

from .smg_args import DEPLOY

pytestmark = pytest.mark.unit

DASHBOARD = DEPLOY / "grafana" / "smg.json"
# a Prometheus series name in PromQL (label names and functions never start with these)
METRIC = re.compile(r"\b((?:smg|router_mesh)_[a-z0-9_]+)\b")
SUFFIXES = {"counter": ("_total", ""), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exposed_series(text: str) -> set[str]:
    """Series names in a Prometheus exposition: each family's `# TYPE` line, with the suffixes
    its kind adds (a counter family `x` serves `x_total`)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            base = family.removesuffix("_total") if kind == "counter" else family
            names |= {base + s for s in SUFFIXES.get(kind, ("",))}
    return names


async def served_metrics_text() -> str:
    from smg.app.gateway import Gateway

    cfg = replace_path(GatewayConfig(), "server", host="127.0.0.1", port=0)
    cfg = replace_path(cfg, "mesh", enable_mesh=True, mesh_host="127.0.0.1", mesh_port=0)
    cfg = replace_path(cfg, "server", shutdown_grace_period_secs=0)
    gw, stop = Gateway(cfg), asyncio.Event()
    async with asyncio.timeout(30), asyncio.TaskGroup() as tg:
        tg.create_task(gw.run(stop))
        await gw.started.wait()
        text = gw.metrics.render().decode()
        stop.set()
    return text


def queried(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    assert exprs, "the dashboard queries nothing"
    return {m for e in exprs for m in METRIC.findall(e)}


async def test_every_metric_the_dashboard_queries_is_served() -> None:
    served = exposed_series(await served_metrics_text())
    assert "smg_http_requests_total" in served and "smg_mesh_members" in served
    wanted = queried(json.loads(DASHBOARD.read_text()))
    assert wanted, "no smg metric in the dashboard"
    assert wanted <= served, sorted(wanted - served)


def test_the_dashboard_covers_rate_errors_latency_workers_and_mesh() -> None:
    wanted = queried(json.loads(DASHBOARD.read_text()))
    assert {
        "smg_http_requests_total",
        "smg_http_responses_total",
        "smg_http_request_duration_seconds_bucket",
        "smg_worker_requests_active",
        "smg_worker_cb_state",
        "smg_mesh_members",
        "smg_router_ttft_seconds_bucket",
        "smg_router_tpot_seconds_bucket",
        "smg_router_tokens_total",
        "smg_engine_running_requests",
        "smg_worker_cb_transitions_total",
        "smg_tokenizer_cache_lookups_total",
        "router_mesh_store_hash",
    } <= wanted


def test_the_dashboard_is_well_formed() -> None:
    """Unique panel ids, panels on the 24-column grid without overlaps, unique refIds."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        refs = [t["refId"] for t in p.get("targets", ())]
        assert len(refs) == len(set(refs)), p["title"]


def test_a_renamed_metric_would_be_caught() -> None:
    text = "# HELP smg_a_total a\n# TYPE smg_a counter\n# TYPE smg_h histogram\n"
    assert exposed_series(text) == {
        "smg_a_total",
        "smg_a",
        "smg_h_bucket",
        "smg_h_sum",
        "smg_h_count",
    }
    assert not {"smg_a_renamed_total"} <= exposed_series(text)


def test_panels_use_the_provisioned_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    from .smg_args import load_all

    (source,) = load_all(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")[0][
        "datasources"
    ]
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
