"""Kubernetes service discovery end to end: a gateway launched with `--service-discovery` watches
pods on an in-process Kubernetes API server (support/kube_api.py: TLS, a bearer token, list +
watch with bookmarks) through a kubeconfig, and serves the `smg sim` workers the pods point at.
Each pod has its own loopback address (127.0.0.2, .3, .4: all local on Linux) and every sim
listens on the one `--service-discovery-port`.

Shown: three Ready pods become three workers that serve the `openai` SDK's requests (each sim's
/sim/stats counts them); a deleted pod's worker leaves /workers within 1 s; the watch stream cut
ten times (twice with the history expired, so the gateway re-lists after 410 Expired)
while a client keeps sending requests removes or re-adds no worker (the worker ids
and the discovery counters stay as they were) and fails no request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from support.kube_api import KubeApi, kube_api

from .conftest import Gateway, Launcher, free_port, http, wait_until

pytestmark = pytest.mark.integration

LABELS = {"app": "sim", "tier": "gpu"}
IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
MODEL = "sim-model"
MSGS = [{"role": "user", "content": "hello"}]


@dataclass
class Cluster:
    api: KubeApi
    gw: Gateway
    port: int


def stats(ip: str, port: int) -> dict[str, int]:
    r = http("GET", f"http://{ip}:{port}/sim/stats", timeout_s=2.0)
    assert r.status == 200, r
    return r.json()


def serving(gw: Gateway) -> dict[str, str]:
    """url -> worker id of the ready workers."""
    return {w["url"]: w["id"] for w in gw.workers() if w["status"] == "ready"}


@pytest.fixture(scope="module")
def cluster(module_launch: Launcher, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder: Path = tmp_path_factory.mktemp("kube")
    port = free_port()
    for ip in IPS:
        module_launch._start(f"sim-{ip}", ["sim", "--host", ip, "--port", str(port)])
    for ip in IPS:
        wait_until(lambda ip=ip: stats(ip, port), 30.0, f"sim on {ip}:{port}")
    with kube_api(folder) as api, pytest.MonkeyPatch.context() as mp:
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setenv("KUBECONFIG", str(api.kubeconfig()))  # the gateway process inherits it
        gw = module_launch.gateway(
            [],
            ready=0,
            service_discovery=True,
            selector=["app=sim", "tier=gpu"],
            service_discovery_namespace="default",
            service_discovery_port=port,
            worker_url_denylist=["127.0.0.9/32"],
            discovery_check_interval_secs=1,  # the periodic pass (default 30 s)
        )
        yield Cluster(api, gw, port)


def test_ready_pods_become_workers_that_serve(cluster: Cluster) -> None:
    api, gw, port = cluster.api, cluster.gw, cluster.port
    api.create_pod("not-ready", ip="127.0.0.5", labels=LABELS, ready=False)
    api.create_pod("other-app", ip="127.0.0.6", labels={"app": "other"})
    for n, ip in enumerate(IPS):
        api.create_pod(f"sim-{n}", ip=ip, labels=LABELS, ready=False, phase="Pending")
    time.sleep(0.3)
    assert gw.workers() == []  # scheduled, not Ready: no workers yet
    for n in range(len(IPS)):
        api.update_pod(f"sim-{n}", ready=True, phase="Running")
    want = {f"http://{ip}:{port}" for ip in IPS}
    wait_until(lambda: set(serving(gw)) == want, 20.0, "three discovered workers ready")
    workers = {w["url"]: w for w in gw.workers()}
    assert set(workers) == want  # the unready and the unmatched pods are not workers
    assert {w["labels"]["smg.ai/pod-name"] for w in workers.values()} == {"sim-0", "sim-1", "sim-2"}
    before = {ip: stats(ip, port)["requests"] for ip in IPS}
    client = gw.client()
    for _ in range(9):
        reply = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4)
        assert reply.choices[0].message.content
    after = {ip: stats(ip, port)["requests"] for ip in IPS}
    assert all(after[ip] - before[ip] >= 1 for ip in IPS), (before, after)  # round robin
    assert gw.metric("smg_discovery_workers_discovered", source="kubernetes") == 3
    assert (
        gw.metric("smg_discovery_registrations_total", source="kubernetes", result="success") == 3
    )


def test_a_deleted_pods_worker_is_gone_within_a_second(cluster: Cluster) -> None:
    api, gw, port = cluster.api, cluster.gw, cluster.port
    gone = f"http://{IPS[2]}:{port}"
    assert gone in serving(gw)
    api.delete_pod("sim-2")
    t0 = time.monotonic()
    wait_until(
        lambda: gw.worker_by_url(gone) is None, 1.0, "deleted pod's worker removed", interval_s=0.02
    )
    took = time.monotonic() - t0
    print(f"deleted pod -> worker gone from /workers in {took * 1000:.0f} ms")
    assert set(serving(gw)) == {f"http://{ip}:{port}" for ip in IPS[:2]}
    before = stats(IPS[2], port)["requests"]
    client = gw.client()
    for _ in range(4):
        client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2)
    assert stats(IPS[2], port)["requests"] == before  # no traffic to the deleted pod's worker
    assert (
        gw.metric("smg_discovery_deregistrations_total", source="kubernetes", reason="reconciled")
        == 1
    )


def test_unready_relabelled_terminating_and_denied_pods_are_not_workers(cluster: Cluster) -> None:
    api, gw, port = cluster.api, cluster.gw, cluster.port
    url = f"http://{IPS[1]}:{port}"
    # a worker added by POST /workers is not discovery's: no pod stands for it, it stays
    manual = f"http://{IPS[2]}:{port}"
    assert gw.request("POST", "/workers", {"url": manual, "model_id": MODEL}).status == 202

    def gone() -> bool:
        return gw.worker_by_url(url) is None

    def back() -> bool:
        return url in serving(gw)

    api.update_pod("sim-1", ready=False)
    wait_until(gone, 2.0, "unready pod's worker removed", interval_s=0.02)
    api.update_pod("sim-1", ready=True)
    wait_until(back, 10.0, "ready again: its worker back")
    api.update_pod("sim-1", labels={"app": "sim"})  # no longer tier=gpu
    wait_until(gone, 2.0, "relabelled pod's worker removed", interval_s=0.02)
    api.update_pod("sim-1", labels=LABELS)
    wait_until(back, 10.0, "matching again: its worker back")
    api.terminate_pod("sim-1")  # deletionTimestamp set, still running
    wait_until(gone, 2.0, "terminating pod's worker removed", interval_s=0.02)
    api.delete_pod("sim-1")
    api.create_pod("sim-1", ip=IPS[1], labels=LABELS)  # its replacement, a new uid
    wait_until(back, 10.0, "the replacement pod's worker")
    failed = gw.metric("smg_discovery_registrations_total", source="kubernetes", result="failed")
    api.create_pod("denied", ip="127.0.0.9", labels=LABELS)
    wait_until(
        lambda: (
            gw.metric("smg_discovery_registrations_total", source="kubernetes", result="failed")
            == (failed or 0) + 1
        ),
        5.0,
        "the denied pod refused",
    )
    assert gw.worker_by_url(f"http://127.0.0.9:{port}") is None
    api.delete_pod("denied")
    assert gw.worker_by_url(manual) is not None  # untouched by every reconcile above
    wid = gw.worker_by_url(manual)["id"]  # type: ignore[index]
    assert gw.request("DELETE", f"/workers/{wid}").status == 202
    wait_until(lambda: gw.worker_by_url(manual) is None, 5.0, "manual worker deleted")


def test_the_periodic_pass_restores_a_discovered_worker_deleted_by_hand(cluster: Cluster) -> None:
    """Level-triggered: DELETE /workers of a discovered worker whose pod is still Ready is undone
    by the next periodic reconcile (--discovery-check-interval-secs 1), with no pod event."""
    gw, port = cluster.gw, cluster.port
    url = f"http://{IPS[0]}:{port}"
    wid = serving(gw)[url]
    assert gw.request("DELETE", f"/workers/{wid}").status == 202
    wait_until(lambda: gw.worker_by_url(url) is None, 5.0, "deleted by hand")
    t0 = time.monotonic()
    wait_until(lambda: url in serving(gw), 5.0, "re-added by the periodic pass")
    assert serving(gw)[url] != wid
    print(f"deleted by hand -> back in {time.monotonic() - t0:.2f} s")


def test_a_grpc_engine_pod_is_detected_and_serves(
    cluster: Cluster, module_launch: Launcher
) -> None:
    """No --worker-urls name a scheme, so each pod's port is probed as the Rust gateway probes
    a bare host:port (HTTP first, then gRPC): the sims above came up as http://, a simulated
    vLLM gRPC engine comes up as grpc:// and serves its model."""
    api, gw, port = cluster.api, cluster.gw, cluster.port
    ip, stats_port = "127.0.0.8", free_port()
    argv = ["sim", "--grpc", "--runtime", "vllm", "--host", ip, "--port", str(port),
            "--model", "grpc-model", "--stats-port", str(stats_port)]  # fmt: skip
    module_launch._start(f"engine-{ip}", argv)
    engine_stats = f"http://{ip}:{stats_port}/sim/stats"
    wait_until(lambda: http("GET", engine_stats, timeout_s=1.0).status == 200, 30.0, "engine")
    api.create_pod("engine", ip=ip, labels=LABELS)
    url = f"grpc://{ip}:{port}"
    wait_until(lambda: url in serving(gw), 30.0, "the engine pod's worker, over gRPC")
    reply = gw.client().chat.completions.create(model="grpc-model", messages=MSGS, max_tokens=4)
    assert reply.choices[0].message.content
    assert http("GET", engine_stats).json()["requests"] >= 1
    api.delete_pod("engine")
    wait_until(lambda: gw.worker_by_url(url) is None, 2.0, "engine worker removed")


def test_watch_cuts_remove_nothing_and_fail_no_request(cluster: Cluster) -> None:
    api, gw = cluster.api, cluster.gw
    ids_before = serving(gw)
    assert len(ids_before) == 2
    regs = gw.metric("smg_discovery_registrations_total", source="kubernetes", result="success")
    deregs = gw.metric(
        "smg_discovery_deregistrations_total", source="kubernetes", reason="reconciled"
    )
    failures: list[BaseException] = []
    done = threading.Event()
    sent = 0

    def client_loop() -> None:
        nonlocal sent
        client = gw.client()
        while not done.is_set():
            try:
                client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2)
                sent += 1
            except openai.OpenAIError as exc:
                failures.append(exc)

    t = threading.Thread(target=client_loop)
    t.start()
    cuts = 0
    try:
        lists = len([r for r in api.requests if not r.get("watch")])
        for n in range(10):
            wait_until(api.open_watches, 5.0, "the gateway watching again", interval_s=0.02)
            if n in (3, 7):  # compacted too: the re-watch gets 410 Expired and lists again
                api.expire_history()
            cuts += api.cut_watches()
            time.sleep(0.25)
            assert serving(gw) == ids_before
    finally:
        done.set()
        t.join(30.0)
    assert cuts == 10
    wait_until(api.open_watches, 5.0, "the gateway watching after the last cut")
    assert serving(gw) == ids_before
    assert not failures, failures[:3]
    assert sent > 10
    assert (
        gw.metric("smg_discovery_registrations_total", source="kubernetes", result="success")
        == regs
    )
    assert (
        gw.metric("smg_discovery_deregistrations_total", source="kubernetes", reason="reconciled")
        == deregs
    )
    assert len([r for r in api.requests if not r.get("watch")]) == lists + 2  # the relists
    watches = [r for r in api.requests if r.get("watch")]
    assert all(r.get("resourceVersion") for r in watches)  # every re-watch resumes
    print(f"10 cuts, {sent} requests, 0 failures, {len(watches)} watch requests")
