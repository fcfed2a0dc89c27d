"""The Kubernetes API as discovery uses it: list pods, watch pods. A thin IO shell over
`kubernetes_asyncio` (its config loading, auth and TLS); the bodies are read raw (no model
objects) and handed to the sans-IO informer (smg/core/informer.py).

Configuration is found as a real deployment has it: in a pod (KUBERNETES_SERVICE_HOST set) the
service account's token and CA under /var/run/secrets/kubernetes.io/serviceaccount; elsewhere
the kubeconfig named by KUBECONFIG (else ~/.kube/config). TLS is verified against the
configured CA. Every request has connect and read timeouts; a watch asks the server to end it
after `watch_timeout_s` and gives up reading after that plus a margin.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

# ~1 s of imports on a loaded box: only `app/discovery.py` imports this module, and only with
# discovery on
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from smg.core.informer import Gone, KubeError, is_gone

_MAX_LIST_BYTES = 256 * 1024 * 1024  # a list of every pod in a big cluster; bounded anyway


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


async def load_client(service_account: Path = SERVICE_ACCOUNT) -> k8s.ApiClient:
    conf = k8s.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(
            client_configuration=conf,
            token_filename=str(service_account / "token"),  # re-read as kubelet rotates it
            cert_filename=str(service_account / "ca.crt"),
        )
    else:
        path = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        await k8s_config.load_kube_config(config_file=path, client_configuration=conf)
    conf.verify_ssl = True
    return k8s.ApiClient(configuration=conf)


class KubePods:
    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str | None,
        label_selector: str,
        *,
        connect_timeout_s: float = 5.0,
        list_timeout_s: float = 30.0,
        watch_timeout_s: int = 240,
    ) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.label_selector = label_selector
        self.connect_timeout_s = connect_timeout_s
        self.list_timeout_s = list_timeout_s
        self.watch_timeout_s = watch_timeout_s

    @classmethod
    async def connect(cls, namespace: str | None, label_selector: str) -> KubePods:
        return cls(await load_client(), namespace, label_selector)

    async def close(self) -> None:
        await self.api.close()

    async def _get(self, timeout: aiohttp.ClientTimeout, **params: Any) -> aiohttp.ClientResponse:
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": timeout}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        kwargs.update(params)
        # with _preload_content=False the generated client hands back aiohttp's response
        if self.namespace:
            raw: Any = await self.core.list_namespaced_pod(self.namespace, **kwargs)
        else:
            raw = await self.core.list_pod_for_all_namespaces(**kwargs)
        resp: aiohttp.ClientResponse = raw
        if resp.status == 200:
            return resp
        try:
            body = orjson.loads(await resp.content.read(64 * 1024))
        except (orjson.JSONDecodeError, aiohttp.ClientError, TimeoutError):
            body = None
        finally:
            resp.release()
        if resp.status == 410 or is_gone(body):
            raise Gone(f"410 {resp.reason}")
        reason = body.get("reason") if isinstance(body, dict) else resp.reason
        raise KubeError(f"{resp.status} {reason}")

    async def list(self) -> tuple[list[Any], str]:
        """Every matching pod and the list's resourceVersion."""
        timeout = aiohttp.ClientTimeout(
            total=self.list_timeout_s, sock_connect=self.connect_timeout_s
        )
        resp = await self._get(timeout)
        try:
            raw = await resp.content.read(_MAX_LIST_BYTES + 1)
        finally:
            resp.release()
        if len(raw) > _MAX_LIST_BYTES:
            raise KubeError("pod list larger than the bound")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise KubeError(f"pod list is not JSON: {exc}") from None
        meta = body.get("metadata") if isinstance(body, dict) else None
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(rv, str) or not isinstance(items, list):
            raise KubeError("pod list without items or resourceVersion")
        return items, rv

    async def watch(
        self, resource_version: str, on_open: Callable[[], None] | None = None
    ) -> AsyncIterator[Any]:
        """The watch events from `resource_version` (bookmarks on), one parsed JSON object per
        line, until the server ends the stream or it drops (aiohttp's error then). `on_open` is
        called once the server has accepted the watch (200)."""
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.connect_timeout_s, sock_read=self.watch_timeout_s + 30
        )
        resp = await self._get(
            timeout,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=self.watch_timeout_s,
        )
        if on_open is not None:
            on_open()
        try:
            async for line in resp.content:  # lines bounded by the client's read buffer
                if line.strip():
                    try:
                        yield orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise KubeError(f"watch event is not JSON: {exc}") from None
        finally:
            resp.release()
