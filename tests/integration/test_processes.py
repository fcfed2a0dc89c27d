"""`--workers 2` (issue 15, "every core used"): two gateway processes on one port, sharing the
workers table, admin changes, rate limits and cache-aware placement over their private mesh; one
/metrics with a `process` label; a killed process is replaced; SIGTERM drains both."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.tls_certs import make_pki

from .conftest import Gateway, Launcher, Sim, http, wait_until
from .test_shutdown import streamed

MSGS = [{"role": "user", "content": "processes"}]
BODY = {"model": "m", "messages": MSGS, "max_tokens": 2}
GROUP = {"processes": 2, "history_backend": "none"}


def per_process(gw: Gateway, name: str, **labels: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for n, lab, value in gw.metrics():
        if n == name and all(lab.get(k) == v for k, v in labels.items()):
            out[lab["process"]] = out.get(lab["process"], 0.0) + value
    return out


def chats(gw: Gateway, n: int) -> list[int]:
    """`n` chats, each over a fresh connection (urllib): their statuses."""
    return [gw.request("POST", "/v1/chat/completions", BODY).status for _ in range(n)]


def children(gw: Gateway) -> list[int]:
    pid = gw.proc.popen.pid
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def start_group(launch: Launcher, sims: list[Sim], **options: Any) -> Gateway:
    """A `--workers 2` gateway, once both processes listen: the parent opens its /metrics then
    (the launcher's readiness check is answered by whichever process listens first)."""
    gw = launch.gateway(sims, **GROUP, **options)

    def metrics_up() -> bool:
        try:
            return gw.metric("smg_gateway_processes") == 2
        except OSError:
            return False

    wait_until(metrics_up, 30.0, "both processes listening")
    return gw


@pytest.fixture(scope="module")
def group(module_launch: Launcher) -> tuple[Gateway, list[Sim]]:
    sims = module_launch.sims("m", "m")
    return start_group(module_launch, sims), sims


def test_both_processes_serve_a_share_of_fresh_connections(
    group: tuple[Gateway, list[Sim]],
) -> None:
    gw, sims = group
    assert len(children(gw)) == 2
    before = sum(s.stats()["completed"] for s in sims)
    statuses = chats(gw, 200)
    assert statuses == [200] * 200
    assert sum(s.stats()["completed"] for s in sims) - before == 200
    counts = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
    total = sum(counts.values())
    shares = {p: c / total for p, c in counts.items()}
    print(f"--workers 2, 200 fresh connections: requests per process {counts}")
    assert set(shares) == {"0", "1"}
    assert all(0.3 <= s <= 0.7 for s in shares.values()), shares
    assert gw.metric("smg_gateway_processes") == 2


def test_a_worker_added_at_the_port_is_routed_to_by_both_processes(
    module_launch: Launcher, group: tuple[Gateway, list[Sim]]
) -> None:
    gw, _ = group
    new = module_launch.sim("m")
    r = gw.request("POST", "/workers", {"url": new.url})
    assert r.status == 202, r

    def both_route_to_it() -> bool:
        chats(gw, 12)
        picks = per_process(gw, "smg_worker_selection_total", worker=new.url)
        return picks.get("0", 0) > 0 and picks.get("1", 0) > 0

    wait_until(both_route_to_it, 15.0, "both processes to route to the added worker")
    assert new.stats()["completed"] > 0


def test_a_killed_process_is_replaced(group: tuple[Gateway, list[Sim]]) -> None:
    gw, _ = group
    victim = children(gw)[0]
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        kids = children(gw)
        restarts = per_process(gw, "smg_gateway_process_restarts_total")
        return len(kids) == 2 and victim not in kids and sum(restarts.values()) == 1

    wait_until(replaced, 15.0, "the killed process replaced")
    wait_until(lambda: gw.metric("smg_gateway_processes") == 2, 15.0, "two processes serving")

    def both_serve() -> bool:
        before = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
        assert chats(gw, 20) == [200] * 20
        after = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
        return all(after.get(p, 0) > before.get(p, 0) for p in ("0", "1"))

    wait_until(both_serve, 15.0, "both processes serving again")


def test_processes_whose_parent_is_killed_stop(group: tuple[Gateway, list[Sim]]) -> None:
    gw, _ = group  # the module's group ends here
    kids = children(gw)
    gw.proc.kill()  # SIGKILL: nothing forwarded; each child notices its parent is gone
    wait_until(
        lambda: not any(Path(f"/proc/{pid}/status").exists() and not zombie(pid) for pid in kids),
        10.0,
        "the orphaned processes to stop",
    )


def test_rate_limit_is_global_and_sigterm_drains_both(launch: Launcher) -> None:
    sim = launch.sim("m", tokens_per_second=20)
    opts: dict[str, Any] = {"rate_limit_tokens_per_second": 10, "mesh_profile": "lan"}
    gw = start_group(launch, [sim], shutdown_grace_period_secs=10, **opts)
    time.sleep(1.1)  # a fresh window
    t0 = time.monotonic()
    statuses: list[int] = []
    while time.monotonic() - t0 < 3.0:
        statuses += chats(gw, 1)
    took = time.monotonic() - t0
    admitted, limited = statuses.count(200), statuses.count(429)
    counts = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
    print(f"--workers 2, 10/s over {took:.1f} s: admitted {admitted}, limited {limited}, {counts}")
    assert admitted + limited == len(statuses)
    assert limited > 0 and set(counts) == {"0", "1"}
    assert admitted <= 1.1 * 10 * (took + 1), admitted  # one limit for the group, not 2x

    time.sleep(1.1)  # a fresh window for the streams
    kids = children(gw)

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(streamed, gw) for _ in range(2)]
        wait_until(lambda: sim.stats()["in_flight"] == 2, 5.0, "two streams on the worker")
        gw.proc.signal(signal.SIGTERM)
        texts = [f.result(timeout=10) for f in futures]
    assert all(texts)
    assert gw.proc.popen.wait(timeout=10) == 0, gw.proc.log_tail()
    assert not any(Path(f"/proc/{pid}").exists() for pid in kids), "a child outlived the parent"
    assert sim.stats()["cancelled_streams"] == 0
    with pytest.raises(OSError):  # nobody serves the port any more
        http("GET", gw.url + "/liveness", timeout_s=1.0)


def zombie(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_cache_aware_sends_a_conversation_to_one_worker_whichever_process_takes_it(
    launch: Launcher,
) -> None:
    # 12 conversations x 6 turns, each request over a fresh connection (the kernel picks the
    # process), sent faster than the processes' cache summaries travel: a new conversation is
    # placed by hashing its opening, the same in both processes (without the hash: 44 of 60 hit)
    sims = launch.sims("m", "m")
    gw = start_group(launch, sims, policy="cache_aware")
    wait_until(lambda: chats(gw, 20) == [200] * 20, 30.0, "both processes serving")
    before = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
    opening = [f"conversation {g}: " + f"shared context {g} " * 20 for g in range(12)]
    last: dict[int, str] = {}
    served: dict[str, int] = {}
    hits = tries = 0
    for i in range(12 * 6):
        g = i % 12
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": opening[g]},
                {"role": "user", "content": f"question {i}"},
            ],
            "max_tokens": 2,
        }
        r = gw.request("POST", "/v1/chat/completions", body)
        assert r.status == 200, r
        worker = r.json()["id"].split("-")[1][:8]  # the sim's tag, the same in both processes
        served[worker] = served.get(worker, 0) + 1
        if g in last:
            tries += 1
            hits += last[g] == worker
        last[g] = worker
    after = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
    took = {p: after.get(p, 0) - before.get(p, 0) for p in after}
    print(f"cache_aware, 2 processes: hits {hits}/{tries}, per process {took}, per worker {served}")
    assert all(took.get(p, 0) > 0 for p in ("0", "1")), took  # both processes placed turns
    assert hits == tries


def test_both_processes_serve_tls_and_the_one_metrics_listener_speaks_it(
    launch: Launcher, tmp_path: Path
) -> None:
    """`--workers 2` with the gateway's certificate: the `openai` SDK (trusting the test CA) is
    served by both processes over TLS, and the parent's /metrics answers over TLS with both
    processes' samples (it scrapes its children's private loopback listeners)."""
    pki = make_pki(tmp_path)
    sim = launch.sim("m")
    tls = {"tls_cert_path": pki.server.cert, "tls_key_path": pki.server.key}
    gw = start_group(launch, [sim], context=pki.client_context(present_cert=False), **tls)
    assert gw.url.startswith("https://")
    done = gw.client().chat.completions.create(model="m", messages=MSGS, max_tokens=3)
    assert done.choices[0].message.content and done.usage and done.usage.completion_tokens == 3
    assert chats(gw, 60) == [200] * 60  # fresh connections: the kernel spreads them
    counts = per_process(gw, "smg_http_requests_total", path="/v1/chat/completions")
    print(f"--workers 2 over TLS, 61 chats: requests per process {counts}")
    assert set(counts) == {"0", "1"} and sum(counts.values()) == 61
    with pytest.raises(OSError):  # the public /metrics is not served in plaintext
        http("GET", f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout_s=2.0)
