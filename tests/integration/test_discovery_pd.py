"""Kubernetes discovery in PD mode: `--pd-disaggregation` with `--prefill-selector` and
`--decode-selector`; a prefill pod's sglang.ai/bootstrap-port annotation becomes its worker's
bootstrap port. A prefill-role and a decode-role `smg sim` (each on its own loopback address)
are found from their pods and serve chats, streams and completions as a pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.kube_api import kube_api

from .conftest import Launcher, drive_pd_requests, free_port, http, wait_until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT = 8998


def test_prefill_and_decode_pods_serve_as_a_pair(launch: Launcher, tmp_path: Path) -> None:
    port = free_port()
    hosts = {"prefill": "127.0.0.41", "decode": "127.0.0.42"}
    for role, host in hosts.items():
        argv = ["sim", "--host", host, "--port", str(port), "--role", role]
        if role == "prefill":
            argv += ["--bootstrap-port", str(BOOTSTRAP_PORT)]
        launch._start(f"sim-{role}", argv)
    for host in hosts.values():
        wait_until(
            lambda host=host: (
                http("GET", f"http://{host}:{port}/health", timeout_s=1.0).status == 200
            ),
            30.0,
            f"sim on {host}",
        )
    with kube_api(tmp_path) as api, pytest.MonkeyPatch.context() as mp:
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setenv("KUBECONFIG", str(api.kubeconfig()))
        gw = launch.gateway(
            [],
            ready=0,
            pd_disaggregation=True,
            service_discovery=True,
            prefill_selector=["app=sim", "role=prefill"],
            decode_selector=["app=sim", "role=decode"],
            service_discovery_port=port,
        )
        api.create_pod(
            "prefill-0",
            ip=hosts["prefill"],
            labels={"app": "sim", "role": "prefill"},
            annotations={"sglang.ai/bootstrap-port": str(BOOTSTRAP_PORT)},
        )
        api.create_pod("decode-0", ip=hosts["decode"], labels={"app": "sim", "role": "decode"})
        wait_until(
            lambda: sum(w["status"] == "ready" for w in gw.workers()) == 2, 20.0, "both roles"
        )
        by_url = {w["url"]: w for w in gw.workers()}
        prefill = by_url[f"http://{hosts['prefill']}:{port}"]
        decode = by_url[f"http://{hosts['decode']}:{port}"]
        assert (prefill["worker_type"], prefill["bootstrap_port"]) == ("prefill", BOOTSTRAP_PORT)
        assert (decode["worker_type"], decode["bootstrap_port"]) == ("decode", None)
        drive_pd_requests(gw, [{"role": "user", "content": "hello pd discovery"}])
        stats = http("GET", f"http://{hosts['decode']}:{port}/sim/stats").json()
        assert stats["requests"] >= 3
