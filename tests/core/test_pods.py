"""The discovery reconcile core: pods -> desired workers -> a plan against what discovery owns."""

from __future__ import annotations

from typing import Any

import pytest

from smg.core.pods import (
    Desired,
    Owned,
    Rules,
    desired_workers,
    list_selector,
    owned_key,
    plan,
    pod_from_json,
    router_seeds,
)

SEL = {"app": "sglang"}
RULES = Rules(selector=SEL, port=8000)


def pod_json(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
    deleting: bool = False,
    namespace: str = "ns1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "labels": SEL if labels is None else labels,
        "annotations": annotations or {},
        "resourceVersion": "7",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def pods(*objs: dict[str, Any]) -> list[Any]:
    return [p for p in map(pod_from_json, objs) if p is not None]


def urls(rules: Rules, *objs: dict[str, Any]) -> set[str]:
    return set(desired_workers(pods(*objs), rules))


def test_a_ready_matching_pod_is_a_worker_at_its_ip_and_the_discovery_port() -> None:
    got = desired_workers(pods(pod_json("a", "10.0.0.5")), RULES)
    assert got == {
        "http://10.0.0.5:8000": Desired("http://10.0.0.5:8000", "uid-a", "a", "regular", None)
    }


@pytest.mark.parametrize(
    "obj",
    [
        pod_json("a", ready=False),
        pod_json("a", phase="Pending"),
        pod_json("a", deleting=True),
        pod_json("a", labels={"app": "other"}),
        pod_json("a", labels={}),
        pod_json("a", ip=None),
    ],
    ids=["unready", "pending", "terminating", "other-label", "no-labels", "no-ip"],
)
def test_pods_that_are_not_workers(obj: dict[str, Any]) -> None:
    assert urls(RULES, obj) == set()


def test_objects_without_name_or_uid_are_skipped() -> None:
    assert pod_from_json({"metadata": {"name": "x"}, "status": {}}) is None
    assert pod_from_json({"metadata": {"uid": "u"}, "status": {}}) is None
    assert pod_from_json("nonsense") is None


def test_an_empty_selector_matches_nothing() -> None:
    assert urls(Rules(selector={}, port=80), pod_json("a")) == set()


def test_worker_ports_annotation_gives_one_worker_per_port_and_grpc_scheme() -> None:
    rules = Rules(selector=SEL, port=8000, scheme="grpc")
    obj = pod_json("a", "10.0.0.5", annotations={"smg.ai/worker-ports": "9000, 9001,9000"})
    assert urls(rules, obj) == {"grpc://10.0.0.5:9000", "grpc://10.0.0.5:9001"}
    bad = pod_json("a", "10.0.0.5", annotations={"smg.ai/worker-ports": "9000,x"})
    assert urls(rules, bad) == {"grpc://10.0.0.5:8000"}  # a bad annotation: the default port


def test_without_a_scheme_urls_are_bare_for_detection() -> None:
    rules = Rules(selector=SEL, port=8000, scheme="")
    assert urls(rules, pod_json("a", "10.0.0.5")) == {"10.0.0.5:8000"}
    assert owned_key("grpc://10.0.0.5:8000", rules) == "10.0.0.5:8000"
    assert owned_key("grpc://10.0.0.5:8000", RULES) == "grpc://10.0.0.5:8000"


def test_ipv6_pod_ips_are_bracketed() -> None:
    assert urls(RULES, pod_json("a", "fd00::5")) == {"http://[fd00::5]:8000"}


PD = Rules(
    port=8000,
    pd=True,
    prefill_selector={"app": "sglang", "role": "prefill"},
    decode_selector={"app": "sglang", "role": "decode"},
)


def test_pd_roles_and_bootstrap_ports() -> None:
    pre = pod_json(
        "p",
        "10.0.0.1",
        labels={"app": "sglang", "role": "prefill"},
        annotations={"sglang.ai/bootstrap-port": "8998"},
    )
    dec = pod_json("d", "10.0.0.2", labels={"app": "sglang", "role": "decode"})
    other = pod_json("o", "10.0.0.3", labels={"app": "sglang"})
    got = desired_workers(pods(pre, dec, other), PD)
    assert {(d.url, d.worker_type, d.bootstrap_port) for d in got.values()} == {
        ("http://10.0.0.1:8000", "prefill", 8998),
        ("http://10.0.0.2:8000", "decode", None),
    }
    assert list_selector(PD) == "app=sglang"  # the labels both roles share
    assert list_selector(RULES) == "app=sglang"


def test_bootstrap_ports_align_with_worker_ports_or_are_ignored() -> None:
    labels = {"app": "sglang", "role": "prefill"}
    two = {"smg.ai/worker-ports": "8000,8001"}
    aligned = pod_json("p", labels=labels, annotations={**two, "sglang.ai/bootstrap-port": "1,2"})
    boots = sorted(d.bootstrap_port or 0 for d in desired_workers(pods(aligned), PD).values())
    assert boots == [1, 2]
    skewed = pod_json("p", labels=labels, annotations={**two, "sglang.ai/bootstrap-port": "1,2,3"})
    assert {d.bootstrap_port for d in desired_workers(pods(skewed), PD).values()} == {None}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (("namespace", ""), "ns1"),
        (("label", "model"), "llama-label"),
        (("annotation", "smg/model"), "llama-annotation"),
        (("label", "missing"), None),
        (None, None),
    ],
)
def test_model_id_from(source: tuple[str, str] | None, expected: str | None) -> None:
    obj = pod_json(
        "a",
        labels={**SEL, "model": "llama-label"},
        annotations={"smg/model": "llama-annotation"},
    )
    rules = Rules(selector=SEL, port=8000, model_id_from=source)
    (d,) = desired_workers(pods(obj), rules).values()
    assert d.model_id == expected


def owned_from(desired: dict[str, Desired]) -> dict[str, Owned]:
    return {url: Owned(f"w-{url}", d.pod_uid) for url, d in desired.items()}


def test_plan_adds_new_pods_and_a_relist_of_the_same_pods_changes_nothing() -> None:
    objs = [pod_json("a", "10.0.0.1"), pod_json("b", "10.0.0.2")]
    desired = desired_workers(pods(*objs), RULES)
    first = plan(desired, {})
    assert {d.url for d in first.add} == set(desired) and first.remove == ()
    again = desired_workers(pods(*reversed(objs)), RULES)  # a re-list, another order
    assert plan(again, owned_from(desired)).empty


@pytest.mark.parametrize(
    "change",
    [
        {"ready": False},
        {"deleting": True},
        {"labels": {"app": "other"}},
        {"phase": "Failed"},
    ],
    ids=["unready", "terminating", "relabelled", "failed"],
)
def test_plan_removes_a_pod_that_stopped_being_a_worker(change: dict[str, Any]) -> None:
    before = desired_workers(pods(pod_json("a", "10.0.0.1"), pod_json("b", "10.0.0.2")), RULES)
    after = desired_workers(
        pods(pod_json("a", "10.0.0.1", **change), pod_json("b", "10.0.0.2")), RULES
    )
    p = plan(after, owned_from(before))
    assert p.remove == ("http://10.0.0.1:8000",) and p.add == ()


def test_plan_replaces_a_worker_whose_ip_went_to_a_new_pod() -> None:
    before = desired_workers(pods(pod_json("a", "10.0.0.1")), RULES)
    after = desired_workers(pods(pod_json("a2", "10.0.0.1")), RULES)
    p = plan(after, owned_from(before))
    assert p.remove == ("http://10.0.0.1:8000",)
    assert [d.pod_uid for d in p.add] == ["uid-a2"]


def test_plan_never_removes_what_discovery_did_not_add() -> None:
    assert plan({}, {}).empty  # a worker added by POST /workers is not in `owned`


def test_router_pods_give_mesh_seeds() -> None:
    rules = Rules(router_selector={"app": "smg"}, mesh_port=39527)
    gw = {"app": "smg"}
    objs = [
        pod_json("a", "10.0.0.1", labels=gw),
        pod_json("b", "10.0.0.2", labels=gw, annotations={"sglang.ai/mesh-port": "4000"}),
        pod_json("c", "10.0.0.3", labels=gw, ready=False),
        pod_json("d", "10.0.0.4", labels=gw, deleting=True),
        pod_json("e", "10.0.0.5", labels={"app": "sglang"}),
        pod_json("f", "10.0.0.6", labels=gw, annotations={"sglang.ai/mesh-port": "bad"}),
    ]
    assert router_seeds(pods(*objs), rules) == {
        "10.0.0.1:39527",
        "10.0.0.2:4000",
        "10.0.0.6:39527",
    }
    assert router_seeds(pods(*objs), Rules()) == set()  # no router selector: none
