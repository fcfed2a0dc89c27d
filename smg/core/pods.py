"""Pods as discovery sees them, and the workers they stand for: a pure core (no IO, no clock).

`pod_from_json` reads the fields discovery needs from a Kubernetes Pod object (as the API server
sends it); `desired_workers` turns the current pod set into the workers that should exist (the
Rust gateway's rules: a pod matching the selector, not terminating, Ready and Running, with an
IP, is one worker per port); `plan` diffs them against the workers discovery added before. It is
level-triggered: the same pods give no actions however often they are seen (a re-list after a
410 or a dropped stream changes nothing), and only workers discovery added are ever removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from smg.config.discovery import (
    BOOTSTRAP_PORT_ANNOTATION,
    MESH_PORT_ANNOTATION,
    WORKER_PORTS_ANNOTATION,
)


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    phase: str
    ready: bool
    deleting: bool
    ip: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def healthy(self) -> bool:
        return self.ready and self.phase == "Running"


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


def pod_from_json(obj: Any) -> Pod | None:
    """The Pod, or None for an object without a name or uid (nothing to track it by)."""
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if not isinstance(meta, dict) or not isinstance(status, dict):
        return None
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str) or not name or not uid:
        return None
    conditions = status.get("conditions") or []
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )
    ip = status.get("podIP")
    return Pod(
        namespace=str(meta.get("namespace") or ""),
        name=name,
        uid=uid,
        phase=str(status.get("phase") or "Unknown"),
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        ip=ip if isinstance(ip, str) and ip else None,
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
    )


@dataclass(frozen=True, slots=True)
class Rules:
    """What discovery looks for (from the launch flags, parsed)."""

    selector: Mapping[str, str] = field(default_factory=dict)
    port: int = 80
    scheme: str = "http"  # "": bare host:port, the protocol detected per worker (HTTP first)
    pd: bool = False  # --pd-disaggregation: roles from the prefill/decode selectors
    prefill_selector: Mapping[str, str] = field(default_factory=dict)
    decode_selector: Mapping[str, str] = field(default_factory=dict)
    model_id_from: tuple[str, str] | None = None  # ("namespace"|"label"|"annotation", key)
    router_selector: Mapping[str, str] = field(default_factory=dict)  # gateway pods (mesh)
    mesh_port: int = 39527  # a router pod's mesh port without the annotation


@dataclass(frozen=True, slots=True)
class Desired:
    url: str
    pod_uid: str
    pod_name: str
    worker_type: str = "regular"  # regular, prefill or decode
    bootstrap_port: int | None = None
    model_id: str | None = None


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def list_selector(rules: Rules) -> str:
    """The labelSelector to list and watch with: the selector, or in PD mode the labels every
    role's selector shares (the rest is filtered here)."""
    if rules.pd:
        sels = [s for s in (rules.prefill_selector, rules.decode_selector) if s]
        common = {k: v for k, v in sels[0].items() if all(s.get(k) == v for s in sels[1:])}
        return ",".join(f"{k}={v}" for k, v in sorted(common.items())) if sels else ""
    return ",".join(f"{k}={v}" for k, v in sorted(rules.selector.items()))


def _port_list(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    ports: list[int] = []
    for part in raw.split(","):
        try:
            port = int(part.strip())
        except ValueError:
            return None
        if not 0 < port < 65536:
            return None
        if port not in ports:
            ports.append(port)
    return ports


def _role(pod: Pod, rules: Rules) -> str | None:
    """The pod's worker type, or None when it is not a worker pod."""
    if not rules.pd:
        return "regular" if matches(pod.labels, rules.selector) else None
    if matches(pod.labels, rules.prefill_selector):
        return "prefill"
    if matches(pod.labels, rules.decode_selector):
        return "decode"
    return None


def _model_id(pod: Pod, rules: Rules) -> str | None:
    match rules.model_id_from:
        case ("namespace", _):
            return pod.namespace or None
        case ("label", key):
            return pod.labels.get(key)
        case ("annotation", key):
            return pod.annotations.get(key)
    return None


def owned_key(url: str, rules: Rules) -> str:
    """A registered worker's URL as `desired_workers` spells it (bare when detected)."""
    return url if rules.scheme else url.split("://", 1)[-1]


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def desired_workers(pods: Iterable[Pod], rules: Rules) -> dict[str, Desired]:
    """url -> the worker that should exist; pods in a stable order so a URL two pods claim
    goes to the same one every time."""
    out: dict[str, Desired] = {}
    for pod in sorted(pods, key=lambda p: p.key):
        role = _role(pod, rules)
        if role is None or pod.deleting or not pod.healthy or pod.ip is None:
            continue
        ports = _port_list(pod.annotations.get(WORKER_PORTS_ANNOTATION)) or [rules.port]
        boots: list[int | None] = [None] * len(ports)
        if role == "prefill":
            given = _port_list(pod.annotations.get(BOOTSTRAP_PORT_ANNOTATION)) or []
            if len(given) == 1:
                boots = [given[0]] * len(ports)
            elif len(given) == len(ports):
                boots = list(given)
        for port, boot in zip(ports, boots, strict=True):
            hostport = f"{_host(pod.ip)}:{port}"
            url = f"{rules.scheme}://{hostport}" if rules.scheme else hostport
            out.setdefault(
                url,
                Desired(url, pod.uid, pod.name, role, boot, _model_id(pod, rules)),
            )
    return out


def router_seeds(pods: Iterable[Pod], rules: Rules) -> set[str]:
    """The mesh addresses (ip:port) of the Ready, Running, not terminating gateway pods: the
    sglang.ai/mesh-port annotation, else the mesh port of this gateway."""
    out: set[str] = set()
    for pod in pods:
        if not matches(pod.labels, rules.router_selector):
            continue
        if pod.deleting or not pod.healthy or pod.ip is None:
            continue
        ports = _port_list(pod.annotations.get(MESH_PORT_ANNOTATION))
        port = ports[0] if ports and len(ports) == 1 else rules.mesh_port
        out.add(f"{_host(pod.ip)}:{port}")
    return out


@dataclass(frozen=True, slots=True)
class Owned:
    """A worker discovery added: its registry id and the pod it stands for."""

    worker_id: str
    pod_uid: str


@dataclass(frozen=True, slots=True)
class Plan:
    remove: tuple[str, ...] = ()  # urls of owned workers to remove (first)
    add: tuple[Desired, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.remove and not self.add


def plan(desired: Mapping[str, Desired], owned: Mapping[str, Owned]) -> Plan:
    """Remove what discovery added and no pod stands for any more (or another pod now has its
    URL); add what is desired and not owned. Workers discovery did not add are not its to
    remove."""
    remove = tuple(
        sorted(
            url
            for url, o in owned.items()
            if url not in desired or desired[url].pod_uid != o.pod_uid
        )
    )
    add = tuple(
        d
        for url, d in sorted(desired.items())
        if url not in owned or owned[url].pod_uid != d.pod_uid
    )
    return Plan(remove, add)
