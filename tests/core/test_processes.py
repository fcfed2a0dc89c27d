"""`--workers N`: the process count, the children's arguments, restart backoff, and the one
/metrics made of every process's (smg/core/processes.py, smg/core/exposition.py)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smg.cli import gateway_config_from, parse
from smg.config import ConfigError, GatewayConfig
from smg.config.mesh_node import seed_addrs
from smg.core import exposition
from smg.core.processes import (
    PEER_FLAGS,
    Backoff,
    child_argv,
    cluster_mesh_args,
    cluster_mesh_port,
    in_cluster,
    launch_args,
    parse_slot,
    plan,
    private_mesh_args,
    without_options,
)


def cfg(*argv: str) -> GatewayConfig:
    return gateway_config_from(parse(["launch", *argv])[1])


def test_default_is_the_cores_unless_state_would_split() -> None:
    assert cfg().server.workers == 0
    assert plan(cfg("--history-backend", "none"), "launch", 4).count == 4
    assert plan(cfg("--history-backend", "redis"), "launch", None).count == 1  # unknown: 1
    single = plan(cfg(), "launch", 4)  # memory history: one process, and why
    assert single.count == 1 and "--history-backend memory" in single.reason
    assert plan(cfg("--history-backend", "none"), "node", 4).count == 4  # children join it
    assert in_cluster(cfg(), "node") and in_cluster(cfg("--enable-mesh"), "launch")
    assert in_cluster(cfg("--join", "h:1"), "launch") and not in_cluster(cfg(), "launch")
    assert plan(cfg("--history-backend", "none", "--workers", "1"), "launch", 4).count == 1
    tls = ("--tls-cert-path", "c.pem", "--tls-key-path", "k.pem")  # every child serves TLS
    assert plan(cfg("--history-backend", "none", *tls), "launch", 4).count == 4
    assert plan(cfg("--history-backend", "none", "--workers", "2", *tls), "launch", 4).count == 2


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--workers", "2"], "--history-backend memory"),
        (
            ["--workers", "2", "--history-backend", "none", "--mesh-port", "0", "--enable-mesh"],
            "consecutive mesh ports",
        ),
        (
            ["--workers", "3", "--history-backend", "none", "--mesh-port", "65534", "--join", "h"],
            "consecutive mesh ports",
        ),
        (["--workers", "-1"], "--workers must be"),
        (["--workers", "65"], "--workers must be"),
    ],
)
def test_an_explicit_count_that_cannot_be_served_is_refused(argv: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        plan(cfg(*argv), "launch", 2)


def test_a_child_is_the_users_gateway_on_the_shared_port_in_a_private_mesh() -> None:
    user = launch_args(["launch", "--port", "0", "--workers", "3", "--policy", "random"])
    mesh = private_mesh_args(4001, [4002])
    argv = child_argv(user, port=8123, mesh_args=mesh, metrics_port=5001)
    c = cfg(*argv[1:])
    assert argv[0] == "launch"
    assert (c.server.port, c.server.workers, c.routing.policy) == (8123, 1, "random")
    assert (c.mesh.enable_mesh, c.mesh.mesh_host, c.mesh.mesh_port) == (True, "127.0.0.1", 4001)
    assert c.mesh.mesh_peer_urls == ("127.0.0.1:4002",)
    assert (c.observability.prometheus_host, c.observability.prometheus_port) == (
        "127.0.0.1",
        5001,
    )


def test_a_child_of_a_cluster_node_is_a_member_on_its_own_port_seeded_with_its_siblings() -> None:
    key = "k" * 16
    user = launch_args(
        ["node", "--mesh-port", "4000", "--join", "h1:7000,h2", "--cluster-key", key]
    )
    c = cfg(*user)
    assert user[0] == "--mesh-port"  # the command word dropped: a child runs `launch`
    mine = without_options(user, PEER_FLAGS)  # the user's peers come from cluster_mesh_args
    argv = child_argv(mine, port=8123, mesh_args=cluster_mesh_args(c.mesh, 1, 3), metrics_port=1)
    child = cfg(*argv[1:])
    assert child.mesh.enable_mesh and child.mesh.mesh_port == 4001 == cluster_mesh_port(c.mesh, 1)
    assert child.mesh.cluster_key == key and child.mesh.mesh_host == "0.0.0.0"
    # the user's peers keep the user's port (a bare h2 is h2:4000, not this child's 4001)
    seeds = seed_addrs(child.mesh)
    assert set(seeds) == {"h1:7000", "h2:4000", "127.0.0.1:4000", "127.0.0.1:4002"}
    assert child.mesh.mesh_server_name is None  # the default name carries the port: unique
    named = cfg("--mesh-server-name", "gw", "--mesh-host", "10.0.0.5", "--mesh-port", "4000")
    args = cluster_mesh_args(named.mesh, 0, 2)
    assert args == [
        "--mesh-port", "4000", "--mesh-server-name", "gw-0", "--mesh-peer-urls", "10.0.0.5:4001"
    ]  # fmt: skip
    assert without_options(
        ["--join", "a", "b", "--policy", "random", "--mesh-peer-urls=c", "--join", "d"], PEER_FLAGS
    ) == ["--policy", "random"]


def test_slots_and_backoff() -> None:
    assert parse_slot("1/2") == (1, 2)
    assert parse_slot(None) is parse_slot("2/2") is parse_slot("x/2") is parse_slot("") is None
    b = Backoff()
    assert [b.next_delay(0.1) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert b.next_delay(120.0) == 0.5  # it served a while: from the start again


def exposition_of(count: float) -> str:
    registry = CollectorRegistry()
    Counter("smg_x", "X", ["path"], registry=registry).labels("/a b").inc(count)
    Histogram("smg_t", "T", buckets=(1.0,), registry=registry).observe(count)
    Gauge("up", "Up", registry=registry).set(1)
    return generate_latest(registry).decode()


def samples_of(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    ]


def test_merged_metrics_keep_every_sample_labelled_and_parse() -> None:
    merged = exposition.merge([("0", exposition_of(3)), ("1", exposition_of(0.5))])
    assert merged.count("# TYPE smg_x_total counter") == 1
    assert samples_of(merged, "smg_x_total") == [
        ({"process": "0", "path": "/a b"}, 3.0),
        ({"process": "1", "path": "/a b"}, 0.5),
    ]
    buckets = samples_of(merged, "smg_t_bucket")
    assert [(b["process"], b["le"], v) for b, v in buckets] == [
        ("0", "1.0", 0.0), ("0", "+Inf", 1.0), ("1", "1.0", 1.0), ("1", "+Inf", 1.0)
    ]  # fmt: skip
    assert [labels["process"] for labels, _ in samples_of(merged, "up")] == ["0", "1"]
    assert exposition.labelled("plain 1", "3") == 'plain{process="3"} 1'
    assert exposition.labelled("empty{} 1", "3") == 'empty{process="3"} 1'
