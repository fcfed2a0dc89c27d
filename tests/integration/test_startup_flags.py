"""The Rust gateway's start-up and health flags on real processes: --worker-startup-delay,
--worker-startup-timeout-secs, --disable-health-check and --remove-unhealthy-workers."""

from __future__ import annotations

import time

from .conftest import Launcher, free_port, wait_until

MSGS = [{"role": "user", "content": "hi"}]


def test_the_first_check_waits_the_startup_delay(launch: Launcher) -> None:
    sim = launch.sim()
    started = time.monotonic()
    gw = launch.gateway([sim], worker_startup_delay=2)
    assert time.monotonic() - started >= 2.0  # ready only after the delay (~0.3 s otherwise)
    assert gw.workers()[0]["status"] == "ready"


def test_a_worker_never_ready_within_the_startup_timeout_is_removed(launch: Launcher) -> None:
    sim = launch.sim()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = launch.gateway([sim, dead], ready=1, worker_startup_timeout_secs=2)
    wait_until(lambda: gw.worker_by_url(dead) is None, 10.0, "the dead worker removed")
    assert [w["url"] for w in gw.workers()] == [sim.url]
    assert "worker_removing" in gw.proc.log_path.read_text()


def test_without_health_checks_a_worker_stays_ready_when_its_process_dies(
    launch: Launcher,
) -> None:
    sim = launch.sim()
    gw = launch.gateway([sim], disable_health_check=True)
    sim.proc.kill()
    time.sleep(3.0)  # three health-check intervals of this gateway
    assert gw.worker_by_url(sim.url)["status"] == "ready"  # type: ignore[index]


def test_a_failed_worker_is_removed_with_remove_unhealthy_workers(launch: Launcher) -> None:
    sim = launch.sim()
    gw = launch.gateway(
        [sim], worker_auto_recovery=True, health_failed_after_secs=1, health_failure_threshold=1
    )
    assert gw.workers()[0]["status"] == "ready"
    sim.proc.kill()
    wait_until(lambda: gw.worker_by_url(sim.url) is None, 15.0, "the failed worker removed")
    assert gw.request("GET", "/readiness").status == 503
