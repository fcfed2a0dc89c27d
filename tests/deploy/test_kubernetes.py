"""deploy/kubernetes: plain manifests under kustomize (no helm installs from a package registry
here, so nothing could render a chart in CI). Each object is validated against the Kubernetes
JSON schemas (kubernetes-validate, strict: an unknown field fails too), and then the wiring that
a schema cannot see: the headless Service behind the StatefulSet, selectors that match the pods,
probes, Secrets, RBAC for pod watching, and smg's command line and environment, parsed by smg:
service discovery finds the engines and the other gateway pods (the mesh's seeds)."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from smg.app.discovery import discovery_rules
from smg.config.discovery import MESH_PORT_ANNOTATION, parse_selector
from smg.core.pods import Pod, matches, router_seeds

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


def test_the_headless_service_names_each_node_before_it_is_ready() -> None:
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
    args = " ".join(CONTAINER.get("command", []) + CONTAINER["args"])
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


NAMESPACE = "inference"  # the namespace the operator applies the manifests in


def _pod_ip(ordinal: int) -> str:
    return f"10.0.0.{10 + ordinal}"


def _pod_env(ordinal: int) -> dict[str, str]:
    """The environment pod `ordinal` gets: the ConfigMap, the fields and $(VAR) references
    resolved as the kubelet does, and stand-ins for the Secret's values."""
    name = f"{STS['metadata']['name']}-{ordinal}"
    fields = {
        "metadata.name": name,
        "metadata.namespace": NAMESPACE,
        "status.podIP": _pod_ip(ordinal),
    }
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


def test_the_container_runs_smg_itself_with_no_start_up_step() -> None:
    # no command: the image's ENTRYPOINT (smg) runs the args (tests/deploy/test_dockerfile.py)
    assert "command" not in CONTAINER
    assert CONTAINER["args"][0] == "node"
    assert "--join" not in CONTAINER["args"]  # peers come from --router-selector
    assert "SMG_WORKER_URLS" not in one("ConfigMap")["data"]  # workers come from discovery


def test_the_container_command_parses_into_discovery_and_a_mesh() -> None:
    labels = POD["metadata"]["labels"]
    for ordinal in range(STS["spec"]["replicas"]):
        command, cfg = check_smg_command(CONTAINER["args"], _pod_env(ordinal))
        assert command == "node" and cfg.mesh.enable_mesh
        assert cfg.server.port == _ports()["http"]
        assert cfg.observability.prometheus_port == _ports()["metrics"]
        d = cfg.discovery
        assert d.service_discovery and cfg.routing.enable_igw  # discovery turns IGW on
        assert parse_selector(d.selector, "--selector") == {"app.kubernetes.io/component": "engine"}
        assert not matches(labels, parse_selector(d.selector, "--selector"))  # not its own pods
        assert d.service_discovery_port == 50051
        assert d.service_discovery_namespace == NAMESPACE  # the pod's own, from the downward API
        assert matches(labels, parse_selector(d.router_selector, "--router-selector"))
        assert not cfg.workers.worker_urls and not cfg.mesh.mesh_peer_urls
        assert cfg.mesh.mesh_port == _ports()["mesh-tcp"] == _ports()["mesh-udp"]
        assert cfg.mesh.mesh_advertise_host == _pod_ip(ordinal)
        assert cfg.mesh.mesh_server_name == f"smg-{ordinal}"


def _gateway_pod(ordinal: int, ready: bool = True) -> Pod:
    """Gateway pod `ordinal` as discovery reads it from the API server."""
    meta = POD["metadata"]
    return Pod(
        namespace=NAMESPACE,
        name=f"smg-{ordinal}",
        uid=f"uid-{ordinal}",
        phase="Running",
        ready=ready,
        deleting=False,
        ip=_pod_ip(ordinal),
        labels=meta["labels"],
        annotations=meta["annotations"],
    )


def test_each_node_finds_the_ready_gateway_pods_as_mesh_seeds_at_their_advertised_address() -> None:
    assert POD["metadata"]["annotations"][MESH_PORT_ANNOTATION] == str(_ports()["mesh-udp"])
    pods = [_gateway_pod(0), _gateway_pod(1), _gateway_pod(2, ready=False)]
    for ordinal in range(STS["spec"]["replicas"]):
        _, cfg = check_smg_command(CONTAINER["args"], _pod_env(ordinal))
        seeds = router_seeds(pods, discovery_rules(cfg))
        # the Ready ones, at the address each advertises (a node skips its own in the mesh)
        assert seeds == {f"{_pod_ip(i)}:{_ports()['mesh-udp']}" for i in (0, 1)}
        own = f"{cfg.mesh.mesh_advertise_host}:{cfg.mesh.mesh_port}"
        assert (own in seeds) == (ordinal != 2)


def test_the_headless_service_stays_because_older_kubernetes_requires_service_name() -> None:
    # serviceName (and so the headless Service) is required through 1.32, optional from 1.33
    bare = copy.deepcopy(STS)
    del bare["spec"]["serviceName"]
    kubernetes_validate.validate(bare, "1.33", strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bare, "1.32", strict=True)
    kubernetes_validate.validate(STS, "1.32", strict=True)


def _readme_yaml(marker: str) -> dict[str, Any]:
    """The YAML block of deploy/README.md that contains `marker`."""
    text = (DEPLOY / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    (block,) = [b for b in blocks if marker in b]
    loaded: dict[str, Any] = yaml.safe_load(block)
    return loaded


def _prometheus_label(k8s_label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", k8s_label)


def test_the_documented_prometheus_job_keeps_the_gateway_pods_metrics_port() -> None:
    (job,) = _readme_yaml("kubernetes_sd_configs")["scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"]
    keep = {
        r["source_labels"][0]: r["regex"]
        for r in job["relabel_configs"]
        if r.get("action") == "keep"
    }
    pod_labels = {
        f"__meta_kubernetes_pod_label_{_prometheus_label(k)}": v
        for k, v in POD["metadata"]["labels"].items()
    }
    port_name = keep.pop("__meta_kubernetes_pod_container_port_name")
    _, cfg = check_smg_command(CONTAINER["args"], _pod_env(0))
    assert _ports()[port_name] == cfg.observability.prometheus_port
    assert keep and all(pod_labels.get(label) == regex for label, regex in keep.items())


def test_the_documented_overlay_patches_the_selector_and_port_words() -> None:
    (patch,) = _readme_yaml("patches:")["patches"]
    assert patch["target"] == {"kind": "StatefulSet", "name": STS["metadata"]["name"]}
    args = copy.deepcopy(CONTAINER["args"])
    for op in yaml.safe_load(patch["patch"]):
        *_, index = op["path"].split("/")
        assert op["path"] == f"/spec/template/spec/containers/0/args/{index}"
        args[int(index)] = op["value"]
    _, cfg = check_smg_command(args, _pod_env(0))
    assert parse_selector(cfg.discovery.selector, "--selector") == {"app": "vllm", "tier": "gpu"}
    assert cfg.discovery.service_discovery_port == 8000
