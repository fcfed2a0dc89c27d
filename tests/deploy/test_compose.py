"""deploy/compose: three gateway nodes in one mesh, two simulated engines, Prometheus and Grafana.

No Docker engine runs here and the docker client has no compose plugin, so `docker compose config`
cannot parse the file: these tests read the YAML (interpolated as compose would) and check what
compose would only find out at `up`: the mesh joins name other gateways' fixed addresses, every
gateway has the cluster key from the one variable, workers and scrape targets exist, and every
smg command line parses with smg's own parser."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

import pytest

from .smg_args import (
    DEPLOY,
    SECRETS,
    check_smg_command,
    flag_value,
    interpolate,
    load_all,
)

pytestmark = pytest.mark.unit

COMPOSE_DIR = DEPLOY / "compose"
RAW = load_all(COMPOSE_DIR / "compose.yaml")[0]
COMPOSE = interpolate(RAW, SECRETS)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
GATEWAYS = {n: s for n, s in SERVICES.items() if s.get("command", [None])[0] == "node"}
ENGINES = {n: s for n, s in SERVICES.items() if s.get("command", [None])[:2] == ["sim", "--grpc"]}


def test_the_file_has_three_gateways_two_engines_prometheus_and_grafana() -> None:
    assert sorted(GATEWAYS) == ["smg-1", "smg-2", "smg-3"]
    assert sorted(ENGINES) == ["engine-a", "engine-b"]
    assert {"prometheus", "grafana"} <= set(SERVICES)
    assert set(SERVICES) == {*GATEWAYS, *ENGINES, "prometheus", "grafana"}


def test_every_required_secret_is_demanded_from_the_environment() -> None:
    for missing in SECRETS:
        env = {k: v for k, v in SECRETS.items() if k != missing}
        with pytest.raises(KeyError, match=missing):
            interpolate(RAW, env)


def test_every_gateway_has_the_cluster_key_from_one_variable() -> None:
    for name in GATEWAYS:
        raw_env = RAW["services"][name]["environment"]
        assert raw_env["SMG_CLUSTER_KEY"].startswith("${SMG_CLUSTER_KEY:?"), name
        assert SERVICES[name]["environment"]["SMG_CLUSTER_KEY"] == SECRETS["SMG_CLUSTER_KEY"]
        assert "--cluster-key" not in SERVICES[name]["command"]  # never on a command line


@pytest.mark.parametrize("name", sorted([*GATEWAYS, *ENGINES]))
def test_every_smg_command_parses_with_smgs_own_parser(name: str) -> None:
    service = SERVICES[name]
    command, _ = check_smg_command(service["command"], service.get("environment", {}))
    assert command in ("node", "sim")


def _mesh_port(service: dict[str, Any]) -> int:
    return int(flag_value(service["command"], "--mesh-port") or 39527)


def _address(name: str) -> str:
    return str(GATEWAYS[name]["networks"]["default"]["ipv4_address"])


def test_the_mesh_joins_other_gateways_at_their_fixed_address_and_mesh_port() -> None:
    # smg's mesh takes addresses, not names (a datagram to a name is dropped), so each gateway
    # has a fixed address in the network's subnet, advertises it, and the joins name those
    subnet = ipaddress.ip_network(COMPOSE["networks"]["default"]["ipam"]["config"][0]["subnet"])
    by_address = {_address(n): n for n in GATEWAYS}
    assert len(by_address) == len(GATEWAYS)
    joined: set[str] = set()
    for name, service in GATEWAYS.items():
        cmd = service["command"]
        assert ipaddress.ip_address(_address(name)) in subnet, name
        assert flag_value(cmd, "--mesh-advertise-host") == _address(name)
        seeds = (flag_value(cmd, "--join") or "").split(",")
        for seed in filter(None, seeds):
            host, port = seed.rsplit(":", 1)
            assert host in by_address and by_address[host] != name, seed
            assert int(port) == _mesh_port(GATEWAYS[by_address[host]]), seed
            joined |= {name, by_address[host]}
    assert joined == set(GATEWAYS)  # one mesh: every node joins or is joined


def test_worker_urls_name_the_engines_at_their_grpc_port() -> None:
    for name, service in GATEWAYS.items():
        _, cfg = check_smg_command(service["command"], service["environment"])
        urls = [urlsplit(u) for u in cfg.workers.worker_urls]
        assert sorted(u.hostname for u in urls) == sorted(ENGINES), name
        for u in urls:
            engine = ENGINES[u.hostname]
            assert u.scheme == "grpc"
            assert u.port == int(flag_value(engine["command"], "--port") or 0)
            assert flag_value(engine["command"], "--host") == "0.0.0.0"


def test_prometheus_scrapes_every_gateway_with_the_metrics_key() -> None:
    prom = load_all(COMPOSE_DIR / "prometheus.yml")[0]
    (job,) = prom["scrape_configs"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    expected = set()
    for name, service in GATEWAYS.items():
        _, cfg = check_smg_command(service["command"], service["environment"])
        expected.add(f"{name}:{cfg.observability.prometheus_port}")
        keys = cfg.auth.control_plane_api_keys
        assert any(k.endswith(":" + SECRETS["SMG_METRICS_KEY"]) for k in keys), name
    assert targets == expected
    secret = "smg_metrics_key"
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    assert secret in SERVICES["prometheus"]["secrets"]
    assert COMPOSE["secrets"][secret] == {"environment": "SMG_METRICS_KEY"}


def test_grafana_mounts_the_dashboard_and_provisioning_that_exist() -> None:
    mounts = [v.split(":") for v in SERVICES["grafana"]["volumes"]]
    for source, _target, *_ in mounts:
        assert (COMPOSE_DIR / source).resolve().exists(), source
    targets = {t for _, t, *_ in mounts}
    assert "/etc/grafana/provisioning" in targets
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in targets
    dashboards = load_all(DEPLOY / "grafana/provisioning/dashboards/smg.yml")[0]
    assert home.startswith(dashboards["providers"][0]["options"]["path"] + "/")


def test_the_image_is_built_from_the_repository_dockerfile_and_runs_read_only() -> None:
    for name in (*GATEWAYS, *ENGINES):
        service = SERVICES[name]
        build = service["build"]
        assert (COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve() == (
            DEPLOY / "Dockerfile"
        )
        assert service["read_only"] is True and "/tmp" in service["tmpfs"], name
    for name in ENGINES:  # the image's HEALTHCHECK is a gateway's; engines bring their own
        assert "50051" in " ".join(SERVICES[name]["healthcheck"]["test"])


def test_pinned_images_only() -> None:
    for name, service in SERVICES.items():
        image = service["image"]
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert tag and tag != "latest" and any(c.isdigit() for c in tag), (name, image)
