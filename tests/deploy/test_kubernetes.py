"""deploy/kubernetes: plain manifests under kustomize (no helm installs from a package registry
here, so nothing could render a chart in CI). Each object is validated against the Kubernetes
JSON schemas (kubernetes-validate, strict: an unknown field fails too), and then the wiring that
a schema cannot see: the headless Service behind the StatefulSet, selectors that match the pods,
probes, Secrets, RBAC for pod watching, and smg's command line and environment, parsed by smg."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from .smg_args import DEPLOY, SECRETS, check_smg_command, load_all

pytestmark = pytest.mark.unit

K8S_DIR = DEPLOY / "kubernetes"
K8S_VERSION = "1.33"  # the oldest Kubernetes minor still supported upstream when written
KUSTOMIZATION = load_all(K8S_DIR / "kustomization.yaml")[0]
OBJECTS = [doc for f in KUSTOMIZATION["resources"] for doc in load_all(K8S_DIR / f)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in OBJECTS if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


STS = one("StatefulSet")
POD = STS["spec"]["template"]
(CONTAINER,) = POD["spec"]["containers"]


def test_the_kustomization_lists_every_manifest() -> None:
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(KUSTOMIZATION["resources"]) == sorted(files)


@pytest.mark.parametrize(
    "obj", OBJECTS, ids=[f"{o['kind']}/{o['metadata']['name']}" for o in OBJECTS]
)
def test_every_object_validates_against_the_kubernetes_schemas(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_validator_refuses_a_misspelt_field() -> None:
    broken = copy.deepcopy(STS)
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_kinds_an_operator_needs_are_all_there() -> None:
    kinds = sorted(o["kind"] for o in OBJECTS)
    assert kinds == sorted(
        ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "Service",
         "StatefulSet", "PodDisruptionBudget"]
    )  # fmt: skip


def _ports(protocol: str | None = None) -> dict[str, int]:
    return {
        p["name"]: p["containerPort"]
        for p in CONTAINER["ports"]
        if protocol in (None, p.get("protocol", "TCP"))
    }


def test_services_select_the_pods_and_target_named_container_ports() -> None:
    labels = POD["metadata"]["labels"]
    assert STS["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for svc in (o for o in OBJECTS if o["kind"] == "Service"):
        assert svc["spec"]["selector"].items() <= labels.items(), svc["metadata"]["name"]
        for port in svc["spec"]["ports"]:
            protocol = port.get("protocol", "TCP")
            assert port["targetPort"] in _ports(protocol), (svc["metadata"]["name"], port)
    pdb = one("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1 < STS["spec"]["replicas"]


def test_the_headless_service_gives_mesh_peers_names_before_they_are_ready() -> None:
    headless = one("Service", STS["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert {(p["port"], p["protocol"]) for p in headless["spec"]["ports"]} == {
        (_ports()["mesh-tcp"], "TCP"),
        (_ports()["mesh-udp"], "UDP"),
    }


def test_probes_ask_liveness_and_readiness_on_the_http_port() -> None:
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/liveness", "port": "http"}
    assert CONTAINER["startupProbe"]["httpGet"] == {"path": "/liveness", "port": "http"}
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readiness", "port": "http"}


def test_keys_come_from_secrets_never_from_the_manifests() -> None:
    env = {e["name"]: e for e in CONTAINER["env"]}
    for name in ("SMG_CLUSTER_KEY", "SMG_API_KEY", "SMG_CONTROL_PLANE_API_KEYS"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "smg-secrets", name
        assert "value" not in env[name]
    assert not [o for o in OBJECTS if o["kind"] == "Secret"]  # the operator creates it
    args = " ".join(CONTAINER["command"] + CONTAINER["args"])
    assert "--cluster-key" not in args and "--api-key" not in args


def test_the_service_account_may_watch_pods() -> None:
    sa = one("ServiceAccount")["metadata"]["name"]
    assert POD["spec"]["serviceAccountName"] == sa
    binding = one("RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa}]
    role = one("Role", binding["roleRef"]["name"])
    rules = [r for r in role["rules"] if "pods" in r["resources"] and "" in r["apiGroups"]]
    assert rules and {"get", "list", "watch"} <= set(rules[0]["verbs"])


def test_the_pod_runs_non_root_on_a_read_only_root_with_resource_requests() -> None:
    pod_sc, sc = POD["spec"]["securityContext"], CONTAINER["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert {"/tmp"} <= {m["mountPath"] for m in CONTAINER["volumeMounts"]}
    assert {"cpu", "memory"} <= set(CONTAINER["resources"]["requests"])


def _pod_ip(ordinal: int) -> str:
    return f"10.0.0.{10 + ordinal}"


def _pod_env(ordinal: int) -> dict[str, str]:
    """The environment pod `ordinal` gets: the ConfigMap, the fields and $(VAR) references
    resolved as the kubelet does, and stand-ins for the Secret's values."""
    name = f"{STS['metadata']['name']}-{ordinal}"
    fields = {"metadata.name": name, "status.podIP": _pod_ip(ordinal)}
    secret_values = {
        "cluster-key": SECRETS["SMG_CLUSTER_KEY"],
        "api-key": SECRETS["SMG_API_KEY"],
        "control-plane-api-keys": "prometheus:Prometheus:user:" + SECRETS["SMG_METRICS_KEY"],
    }
    env: dict[str, str] = {}
    for ref in CONTAINER["envFrom"]:
        env.update(one("ConfigMap", ref["configMapRef"]["name"])["data"])
    for e in CONTAINER["env"]:
        source = e.get("valueFrom", {})
        if "fieldRef" in source:
            env[e["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            env[e["name"]] = secret_values[source["secretKeyRef"]["key"]]
        else:
            value = e["value"]
            for var, v in env.items():
                value = value.replace(f"$({var})", v)
            env[e["name"]] = value
    return env


SCRIPT, DOLLAR0, *SMG_ARGV = CONTAINER["args"]


def _argv(ordinal: int) -> list[str]:
    """smg's command line in pod `ordinal` once the start-up step found the other pods."""
    mesh_port = _ports()["mesh-tcp"]
    peers = [f"{_pod_ip(i)}:{mesh_port}" for i in range(STS["spec"]["replicas"]) if i != ordinal]
    return [*SMG_ARGV, "--join", ",".join(peers)]


def test_the_start_up_step_finds_peers_through_the_headless_service() -> None:
    # smg's mesh takes addresses, not names: the shell step resolves the headless Service
    assert CONTAINER["command"] == ["/bin/sh", "-c"] and DOLLAR0 == "smg"
    assert f"getent ahostsv4 {STS['spec']['serviceName']} " in SCRIPT
    assert f"s/$/:{_ports()['mesh-tcp']}/" in SCRIPT  # the peers' mesh port
    assert '-F "$POD_IP"' in SCRIPT  # not itself
    assert 'set -- "$@" --join "$peers"' in SCRIPT and SCRIPT.rstrip().endswith('exec smg "$@"')
    assert "--join" not in SMG_ARGV


def test_the_container_command_parses_with_smgs_parser() -> None:
    for ordinal in range(STS["spec"]["replicas"]):
        command, cfg = check_smg_command(_argv(ordinal), _pod_env(ordinal))
        assert command == "node"
        assert cfg.server.port == _ports()["http"]
        assert cfg.observability.prometheus_port == _ports()["metrics"]
        assert cfg.mesh.mesh_port == _ports()["mesh-tcp"] == _ports()["mesh-udp"]
        assert cfg.workers.worker_urls  # the ConfigMap's list reached smg
        # each node advertises its pod address, the one its peers' --join lists give it
        assert cfg.mesh.mesh_advertise_host == _pod_ip(ordinal)
        assert _pod_ip(ordinal) not in "".join(cfg.mesh.mesh_peer_urls)
