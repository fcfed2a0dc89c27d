"""The pod watch loop (actors/pod_watch.py) with the real client against the in-process API
server, on a fake clock: every wait between tries is on the injected clock (nothing retries
until it advances), the backoff grows while the API refuses and resets once a watch is
accepted, a cut stream resumes from the last resourceVersion, 410 re-lists."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter
from support.kube_api import KubeApi, kube_api

from smg.actors.kube_pods import KubePods
from smg.actors.pod_watch import PodSource, PodWatch
from smg.clock import FakeClock
from smg.core.informer import Backoff, Informer

LABELS = {"app": "sglang"}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeApi]:
    with kube_api(tmp_path, bookmark_every_s=30.0) as server:
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig()))
        yield server


async def until(predicate: object, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def calls(api: KubeApi, watch: bool) -> list[dict[str, str]]:
    return [r for r in api.requests if bool(r.get("watch")) == watch]


async def test_retries_wait_on_the_clock_and_resume_where_they_left_off(api: KubeApi) -> None:
    api.create_pod("a", ip="10.0.0.1", labels=LABELS)
    real_token, api.token = api.token, "not-yet"  # the API refuses the client at first
    clock = FakeClock()
    seen: list[set[str]] = []

    async def connect() -> PodSource:
        return await KubePods.connect("default", "app=sglang")

    def changed(inf: Informer) -> None:
        seen.append(set(inf.pods))

    restarts = Counter("r", "r", ["source", "reason"], registry=CollectorRegistry())
    backoff = Backoff(base_s=1.0, cap_s=8.0)
    watch = PodWatch(
        "workers", connect, changed, clock=clock, rng=random.Random(3), restarts=restarts,
        backoff=backoff,
    )  # fmt: skip
    task = asyncio.create_task(watch.run())
    try:
        await until(lambda: len(calls(api, False)) == 1, "the first list")
        await asyncio.sleep(0.2)
        assert len(calls(api, False)) == 1  # no retry until the clock moves
        await clock.advance(backoff.delay_s(0, random.Random(3)))  # the first wait, exactly
        await until(lambda: len(calls(api, False)) == 2, "the second list")
        assert seen == []
        api.token = real_token
        await clock.advance(2.0)  # attempt 1 waits at most 2 s
        await until(lambda: seen == [{"default/a"}], "the pods listed")
        await until(lambda: len(calls(api, True)) == 1, "the watch")
        rv = calls(api, True)[0]["resourceVersion"]
        api.create_pod("b", ip="10.0.0.2", labels=LABELS)
        await until(lambda: len(seen) == 2, "the watch event")
        last = str(api.rv)
        assert api.cut_watches() == 1
        await asyncio.sleep(0.1)
        assert len(calls(api, True)) == 1  # waiting on the clock again...
        await clock.advance(1.0)  # ...a short wait: the watch had been accepted (reset)
        await until(lambda: len(calls(api, True)) == 2, "the re-watch")
        assert calls(api, True)[1]["resourceVersion"] == last != rv
        api.expire_history()
        api.cut_watches()
        await clock.advance(1.0)
        await until(lambda: len(calls(api, False)) == 3, "the re-list after 410")
        await until(lambda: len(calls(api, True)) >= 4, "watching again")
        assert seen[-1] == {"default/a", "default/b"} and len(seen) == 2  # the re-list: no change
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
