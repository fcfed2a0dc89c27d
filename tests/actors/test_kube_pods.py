"""The Kubernetes client shell (kubernetes-asyncio, raw JSON) against the in-process API server
(support/kube_api.py): kubeconfig + bearer token over verified TLS, list, watch with bookmarks,
410 on an expired resourceVersion, a cut stream, a refused token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.kube_api import KubeApi, kube_api

from smg.actors.kube_pods import Gone, KubeError, KubePods, load_client
from smg.core.informer import Informer, Step

LABELS = {"app": "sglang"}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeApi]:
    with kube_api(tmp_path, bookmark_every_s=0.1) as server:
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig()))
        yield server


async def pods(namespace: str | None = "default", selector: str = "app=sglang") -> KubePods:
    return KubePods(await load_client(), namespace, selector, watch_timeout_s=5)


async def take(source: KubePods, rv: str, n: int, *, skip_bookmarks: bool = True) -> list[Any]:
    out: list[Any] = []

    async def run() -> None:
        async for ev in source.watch(rv):
            if skip_bookmarks and ev["type"] == "BOOKMARK":
                continue
            out.append(ev)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), 5.0)
    return out


async def test_list_and_watch_through_a_kubeconfig(api: KubeApi) -> None:
    api.create_pod("a", ip="10.0.0.1", labels=LABELS)
    api.create_pod("x", ip="10.0.0.9", labels={"app": "other"})
    api.create_pod("n", ip="10.0.0.8", labels=LABELS, namespace="elsewhere")
    source = await pods()
    try:
        items, rv = await source.list()
        assert [i["metadata"]["name"] for i in items] == ["a"]
        inf = Informer()
        assert inf.relisted(items, rv) is Step.CHANGED
        api.create_pod("b", ip="10.0.0.2", labels=LABELS)
        api.update_pod("a", ready=False)
        api.update_pod("b", labels={"app": "other"})  # leaves the selector: DELETED
        events = await take(source, rv, 3)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "b"),
        ]
        for e in events:
            inf.event(e)
        assert set(inf.pods) == {"default/a"} and not inf.pods["default/a"].ready
        watch = next(r for r in api.requests if r.get("watch"))
        assert watch["allowWatchBookmarks"].lower() == "true" and watch["resourceVersion"] == rv
        assert watch["labelSelector"] == "app=sglang" and int(watch["timeoutSeconds"]) == 5
    finally:
        await source.close()


async def test_all_namespaces_and_bookmarks(api: KubeApi) -> None:
    api.create_pod("n", ip="10.0.0.8", labels=LABELS, namespace="elsewhere")
    source = await pods(namespace=None)
    try:
        items, rv = await source.list()
        assert [i["metadata"]["namespace"] for i in items] == ["elsewhere"]
        (bookmark,) = await take(source, rv, 1, skip_bookmarks=False)
        assert bookmark["type"] == "BOOKMARK"
        inf = Informer()
        inf.relisted(items, rv)
        api.create_pod("m", ip="10.0.0.7", labels=LABELS, namespace="elsewhere")
        assert inf.event(bookmark) is Step.SAME
    finally:
        await source.close()


async def test_an_expired_resource_version_gets_410_and_a_relist_recovers(api: KubeApi) -> None:
    api.create_pod("a", ip="10.0.0.1", labels=LABELS)
    source = await pods()
    try:
        items, rv = await source.list()
        inf = Informer()
        inf.relisted(items, rv)
        api.delete_pod("a")
        api.create_pod("b", ip="10.0.0.2", labels=LABELS)
        api.expire_history()
        (err,) = await take(source, rv, 1)
        assert inf.event(err) is Step.RELIST
        items, rv2 = await source.list()
        assert inf.relisted(items, rv2) is Step.CHANGED and set(inf.pods) == {"default/b"}
    finally:
        await source.close()


async def test_a_cut_stream_raises_and_the_watch_resumes_from_the_last_version(
    api: KubeApi,
) -> None:
    source = await pods()
    try:
        _, rv = await source.list()
        api.create_pod("a", ip="10.0.0.1", labels=LABELS)
        got: list[Any] = []

        async def follow() -> None:
            async for ev in source.watch(rv):
                if ev["type"] != "BOOKMARK":
                    got.append(ev)

        task = asyncio.create_task(follow())
        for _ in range(100):
            if got and api.open_watches():
                break
            await asyncio.sleep(0.02)
        assert api.cut_watches() == 1
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(task, 5.0)
        last = got[-1]["object"]["metadata"]["resourceVersion"]
        api.create_pod("b", ip="10.0.0.2", labels=LABELS)
        (again,) = await take(source, last, 1)  # nothing missed, nothing repeated
        assert again["object"]["metadata"]["name"] == "b"
    finally:
        await source.close()


async def test_a_refused_token_is_an_error_without_the_token(
    api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(token="wrong-token-123")))
    source = await pods()
    try:
        with pytest.raises(KubeError) as err:
            await source.list()
        assert "401" in str(err.value) and "wrong-token" not in str(err.value)
    finally:
        await source.close()


async def test_an_untrusted_server_is_refused(
    api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    cfg = api.kubeconfig()
    cfg.write_text(cfg.read_text().replace(str(api.ca_path), str(other)))
    source = await pods()
    try:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await source.list()
    finally:
        await source.close()


async def test_in_cluster_config_from_the_service_account(
    api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod: KUBERNETES_SERVICE_HOST/PORT and the service account's token and CA (the
    folder is /var/run/secrets/kubernetes.io/serviceaccount there); KUBECONFIG is not read."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(api.token)
    (account / "ca.crt").write_text(api.ca_path.read_text())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    api.create_pod("a", ip="10.0.0.1", labels=LABELS)
    source = KubePods(await load_client(account), "default", "app=sglang")
    try:
        items, _ = await source.list()
        assert [i["metadata"]["name"] for i in items] == ["a"]
    finally:
        await source.close()


async def test_a_failed_list_says_gone_or_its_status(api: KubeApi) -> None:
    api.fail_lists = [410, 500]
    source = await pods()
    try:
        with pytest.raises(Gone):
            await source.list()
        with pytest.raises(KubeError, match="500 InternalError"):
            await source.list()
        items, _ = await source.list()  # then it answers again
        assert items == []
    finally:
        await source.close()
