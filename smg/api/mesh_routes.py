"""Admin routes and metrics of the mesh: `GET /mesh/status`, `POST /mesh/faults` (chaos only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from smg import errors
from smg.actors.mesh_transport import FaultPlan

Status = Callable[[], dict[str, Any] | None]


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


class MeshRoutes:
    def __init__(self, status: Status, faults: FaultPlan | None) -> None:
        self.status = status
        self.faults = faults  # None unless --mesh-fault-injection

    def install(self, app: web.Application) -> None:
        app.router.add_get("/mesh/status", self.get_status)
        if self.faults is not None:
            app.router.add_post("/mesh/faults", self.set_faults)

    async def get_status(self, request: web.Request) -> web.Response:
        status = self.status()
        if status is None:
            raise errors.ApiError(503, "mesh_not_running", "The mesh node is not running")
        return _json(status)

    async def set_faults(self, request: web.Request) -> web.Response:
        """`{"drop": 0.1, "delay_ms": [5, 50], "blocked": ["127.0.0.2:39527"]}`: replaces the
        current plan (omitted keys reset)."""
        assert self.faults is not None
        try:
            body = await request.json(loads=orjson.loads)
        except (ValueError, orjson.JSONDecodeError):
            raise errors.ApiError(400, "invalid_json", "Body is not valid JSON") from None
        if not isinstance(body, dict):
            raise errors.ApiError(400, "invalid_request", "Body must be a JSON object")
        drop = body.get("drop", 0.0)
        delay = body.get("delay_ms", [0, 0])
        blocked = body.get("blocked", [])
        if (
            not isinstance(drop, int | float)
            or not 0 <= drop <= 1
            or not isinstance(delay, list)
            or len(delay) != 2
            or not all(isinstance(d, int | float) and d >= 0 for d in delay)
            or not isinstance(blocked, list)
            or not all(isinstance(b, str) for b in blocked)
        ):
            raise errors.ApiError(
                400,
                "invalid_request",
                "Expected drop in [0, 1], delay_ms as [min, max] >= 0, blocked as [host:port]",
            )
        self.faults.drop = float(drop)
        self.faults.delay_s = (delay[0] / 1000.0, max(delay) / 1000.0)
        self.faults.blocked = set(blocked)
        return _json({"drop": self.faults.drop, "delay_ms": delay, "blocked": sorted(blocked)})


class MeshCollector(Collector):
    """`smg_mesh_*` series, read from the node's status at scrape time."""

    def __init__(self, status: Status) -> None:
        self.status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        st = self.status()
        if st is None:
            return
        members = GaugeMetricFamily(
            "smg_mesh_members", "Mesh members in this node's view by state", labels=["state"]
        )
        counts: dict[str, int] = {"alive": 0, "suspect": 0, "dead": 0, "left": 0}
        for m in st["members"]:
            counts[m["state"]] = counts.get(m["state"], 0) + 1
        for state, n in counts.items():
            members.add_metric([state], n)
        yield members
        inc = GaugeMetricFamily("smg_mesh_incarnation", "This node's SWIM incarnation")
        inc.add_metric([], st["incarnation"])
        yield inc
        for direction in ("in", "out"):
            fam = CounterMetricFamily(
                f"smg_mesh_bytes_{direction}",
                f"Mesh bytes {'received' if direction == 'in' else 'sent'} by channel",
                labels=["channel"],
            )
            for channel, n in st[f"bytes_{direction}"].items():
                fam.add_metric([channel], n)
            yield fam
        dropped = CounterMetricFamily(
            "smg_mesh_dropped_messages", "Mesh messages dropped, by reason", labels=["reason"]
        )
        for reason, n in st["dropped"].items():
            dropped.add_metric([reason], n)
        yield dropped
        rejected = CounterMetricFamily(
            "smg_mesh_rejected_writes",
            "Replicated-document updates refused before merging (a write to another node's key, "
            "a bad signature, an invalid value...), by namespace and reason",
            labels=["namespace", "reason"],
        )
        for namespace, reasons in st.get("rejected_writes", {}).items():
            for reason, n in reasons.items():
                rejected.add_metric([namespace, reason], n)
        yield rejected
        doc = GaugeMetricFamily(
            "smg_mesh_doc_bytes", "Encoded size of each replicated document", labels=["namespace"]
        )
        for name, ns in st["namespaces"].items():
            doc.add_metric([name], ns.get("state_bytes", 0))
        yield doc
        yield from _rust_mesh_series(st)


def _rust_mesh_series(st: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    """The Rust gateway's mesh gauges that smg's mesh has an answer to: a peer is "connected"
    while this node sees it alive (labelled by its address: one series per configured peer,
    not per boot); a store is a replicated document (its live keys; its content digest's first
    48 bits as a number, equal on every node that has converged)."""
    peers = GaugeMetricFamily(
        "router_mesh_peer_connections", "Peers this node sees alive (1) or not (0)", labels=["peer"]
    )
    alive: dict[str, float] = {}  # a restarted peer is a new member at the same address
    for m in st["members"]:
        if m["node_id"] != st["node_id"]:
            up = 1.0 if m["state"] == "alive" else 0.0
            alive[m["addr"]] = max(up, alive.get(m["addr"], 0.0))
    for addr, up in alive.items():
        peers.add_metric([addr], up)
    yield peers
    size = GaugeMetricFamily(
        "router_mesh_store_cardinality", "Live keys of each replicated document", labels=["store"]
    )
    digest = GaugeMetricFamily(
        "router_mesh_store_hash",
        "First 48 bits of each replicated document's content digest (equal once converged)",
        labels=["store"],
    )
    for name, ns in st["namespaces"].items():
        size.add_metric([name], ns.get("live_keys", 0))
        digest.add_metric([name], float(int(ns.get("digest", "0")[:12] or "0", 16)))
    yield size
    yield digest
