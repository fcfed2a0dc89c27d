"""The informer state machine: list, watch events, bookmarks, 410 Gone, backoff."""

from __future__ import annotations

import random
from typing import Any

import pytest

from core.test_pods import pod_json
from smg.core.informer import Backoff, Informer, Step, WatchError, is_gone


def ev(kind: str, obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}
    return {"type": kind, "object": obj}


def listed(*objs: dict[str, Any]) -> Informer:
    inf = Informer()
    assert inf.relisted(list(objs), "10") is Step.CHANGED
    return inf


def test_a_list_then_events_keep_the_pod_set_and_the_resource_version() -> None:
    inf = listed(pod_json("a"))
    assert set(inf.pods) == {"ns1/a"} and inf.resource_version == "10"
    assert inf.event(ev("ADDED", pod_json("b"), "11")) is Step.CHANGED
    assert inf.event(ev("MODIFIED", pod_json("b", ready=False), "12")) is Step.CHANGED
    assert not inf.pods["ns1/b"].ready
    assert inf.event(ev("DELETED", pod_json("a"), "13")) is Step.CHANGED
    assert set(inf.pods) == {"ns1/b"} and inf.resource_version == "13"


def test_a_modification_discovery_does_not_see_is_no_change() -> None:
    inf = listed(pod_json("a"))
    assert inf.event(ev("MODIFIED", pod_json("a"), "11")) is Step.SAME
    assert inf.resource_version == "11"


def test_bookmarks_only_advance_the_resource_version() -> None:
    inf = listed(pod_json("a"))
    bookmark = {
        "type": "BOOKMARK",
        "object": {"kind": "Pod", "metadata": {"resourceVersion": "99"}},
    }
    assert inf.event(bookmark) is Step.SAME
    assert inf.resource_version == "99" and set(inf.pods) == {"ns1/a"}


def test_a_410_error_event_asks_for_a_relist_and_others_raise() -> None:
    inf = listed(pod_json("a"))
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    assert inf.event(gone) is Step.RELIST
    assert is_gone({"reason": "Expired"}) and is_gone({"code": 410}) and not is_gone({"code": 500})
    with pytest.raises(WatchError):
        inf.event({"type": "ERROR", "object": {"code": 500, "reason": "InternalError"}})
    with pytest.raises(WatchError):
        inf.event({"type": "WHATEVER", "object": {}})


def test_a_relist_with_the_same_pods_is_no_change_and_drops_pods_gone_meanwhile() -> None:
    inf = listed(pod_json("a"), pod_json("b"))
    assert inf.relisted([pod_json("b"), pod_json("a")], "20") is Step.SAME
    assert inf.relisted([pod_json("b")], "21") is Step.CHANGED
    assert set(inf.pods) == {"ns1/b"} and inf.resource_version == "21"


def test_backoff_is_bounded_jittered_and_seeded() -> None:
    b = Backoff(base_s=0.1, cap_s=2.0)
    delays = [b.delay_s(n, random.Random(7)) for n in range(40)]
    assert all(0.05 <= d <= 2.0 for d in delays)
    assert delays[0] <= 0.1 and max(delays[10:]) > 1.0
    assert delays == [b.delay_s(n, random.Random(7)) for n in range(40)]  # deterministic
