"""Kubernetes discovery of mesh peers: `--router-selector` with the mesh on. Two `smg node`
gateways with no --join find each other's mesh address from their pods (one by the
sglang.ai/mesh-port annotation, one by the shared --mesh-port) and form one mesh."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.kube_api import kube_api

from .conftest import Gateway, Launcher, free_port, wait_until

pytestmark = pytest.mark.integration


def test_router_pods_become_mesh_seeds(launch: Launcher, tmp_path: Path) -> None:
    """`--router-selector` with the mesh on: two `smg node` gateways with no --join find each
    other's mesh address from their pods (one by the sglang.ai/mesh-port annotation, one by
    the shared --mesh-port) and form one mesh."""
    mesh_port = free_port()
    hosts = ("127.0.0.31", "127.0.0.32")
    with kube_api(tmp_path) as api, pytest.MonkeyPatch.context() as mp:
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setenv("KUBECONFIG", str(api.kubeconfig()))
        nodes = [
            launch.gateway(
                [],
                ready=0,
                command="node",
                mesh_host=host,
                mesh_port=mesh_port,
                mesh_profile="test",
                cluster_key="discovery-test-cluster-key",
                service_discovery=True,
                selector=["app=sim"],
                router_selector=["app=smg"],
            )
            for host in hosts
        ]
        api.create_pod("gw-a", ip=hosts[0], labels={"app": "smg"})
        api.create_pod(
            "gw-b",
            ip=hosts[1],
            labels={"app": "smg"},
            annotations={"sglang.ai/mesh-port": str(mesh_port)},
        )

        def members(gw: Gateway) -> set[str]:
            r = gw.request("GET", "/mesh/status")
            assert r.status == 200, r
            return {m["addr"] for m in r.json()["members"] if m["state"] == "alive"}

        want = {f"{h}:{mesh_port}" for h in hosts}
        wait_until(lambda: all(members(gw) == want for gw in nodes), 15.0, "two nodes in one mesh")
