"""Worker discovery from Kubernetes pods (`--service-discovery`): the Rust gateway's flags,
names and defaults (its `service_discovery.rs`), checked once at start."""

from __future__ import annotations

from dataclasses import dataclass

from smg.config.knobs import ConfigError, knob

# The pod annotations the Rust gateway reads (fixed there too, not flags).
WORKER_PORTS_ANNOTATION = "smg.ai/worker-ports"  # "8000,8001": one worker per port
BOOTSTRAP_PORT_ANNOTATION = "sglang.ai/bootstrap-port"  # a prefill pod's KV bootstrap port(s)
MESH_PORT_ANNOTATION = "sglang.ai/mesh-port"  # a router (gateway) pod's mesh port
POD_NAME_LABEL = "smg.ai/pod-name"  # set on every discovered worker's labels
POD_UID_LABEL = "smg.ai/pod-uid"
DISCOVERED_BY_LABEL = "smg.ai/discovered-by"  # the boot that added it (smg's own, not Rust's)


@dataclass(frozen=True, slots=True)
class DiscoveryConfig:
    service_discovery: bool = knob(
        False,
        "Find workers by watching Kubernetes pods (in-cluster service account, else "
        "KUBECONFIG); turns IGW mode on. The legacy spelling of --discovery-provider kubernetes.",
    )
    discovery_provider: str | None = knob(
        None,
        "Worker discovery provider. Give this or --service-discovery, not both.",
        choices=("kubernetes",),
    )
    selector: tuple[str, ...] = knob(
        (), "Label selector of worker pods (key1=value1 key2=value2).", nargs="extend"
    )
    service_discovery_port: int = knob(
        80,
        "Port of discovered worker pods without a smg.ai/worker-ports annotation "
        "(pods running several servers list their ports there).",
    )
    service_discovery_namespace: str | None = knob(
        None, "Namespace to watch (default: all namespaces; needs cluster-wide list/watch)."
    )
    prefill_selector: tuple[str, ...] = knob(
        (),
        "Label selector of prefill pods in PD mode (a sglang.ai/bootstrap-port annotation "
        "gives their KV bootstrap port).",
        nargs="extend",
    )
    decode_selector: tuple[str, ...] = knob(
        (), "Label selector of decode pods in PD mode.", nargs="extend"
    )
    router_selector: tuple[str, ...] = knob(
        (),
        "Label selector of gateway pods in HA mesh mode: with the mesh on, each Ready one's "
        "IP and sglang.ai/mesh-port annotation (else --mesh-port) join the mesh's seeds.",
        nargs="extend",
    )
    model_id_from: str | None = knob(
        None,
        "Each discovered worker's model id from its pod: namespace, label:<key> or "
        "annotation:<key> (default: what the worker reports).",
    )
    discovery_check_interval_secs: int | None = knob(
        None,
        "Seconds between periodic reconciles of the watched pods with the registry (default "
        "30; changes are applied as soon as they are seen, this repairs anything missed).",
    )


def parse_selector(entries: tuple[str, ...], flag: str) -> dict[str, str]:
    """`("app=sglang", "tier=gpu")` -> a dict; a malformed entry stops the start."""
    out: dict[str, str] = {}
    for entry in entries:
        for part in entry.replace(",", " ").split():
            key, eq, value = part.partition("=")
            if not eq or not key:
                raise ConfigError(f"{flag}: {part!r} is not key=value")
            out[key] = value
    return out


def parse_model_id_from(value: str | None) -> tuple[str, str] | None:
    """`namespace` -> ("namespace", ""); `label:K` / `annotation:K` -> (kind, K)."""
    if value is None:
        return None
    if value.lower() == "namespace":
        return ("namespace", "")
    kind, colon, key = value.partition(":")
    if colon and kind in ("label", "annotation"):
        if not key:
            raise ConfigError(f"--model-id-from: {kind}: requires a key name")
        return (kind, key)
    raise ConfigError(
        f"Invalid --model-id-from value {value!r}. Expected: namespace, label:<key>, "
        "or annotation:<key>"
    )


def check_interval_s(cfg: DiscoveryConfig) -> int:
    given = cfg.discovery_check_interval_secs
    return 30 if given is None else given


def discovery_enabled(cfg: DiscoveryConfig) -> bool:
    return cfg.service_discovery or cfg.discovery_provider == "kubernetes"


def check_discovery(cfg: DiscoveryConfig, *, pd: bool) -> None:
    """What the Rust gateway refuses, refused here before anything starts."""
    if cfg.service_discovery and cfg.discovery_provider is not None:
        raise ConfigError("give --service-discovery or --discovery-provider, not both")
    if not discovery_enabled(cfg):
        return
    if not 0 < cfg.service_discovery_port < 65536:
        raise ConfigError("--service-discovery-port must be 1-65535")
    if check_interval_s(cfg) < 1:
        raise ConfigError("--discovery-check-interval-secs must be at least 1")
    parse_model_id_from(cfg.model_id_from)
    parse_selector(cfg.router_selector, "--router-selector")
    if pd:
        pre = parse_selector(cfg.prefill_selector, "--prefill-selector")
        dec = parse_selector(cfg.decode_selector, "--decode-selector")
        if not pre and not dec:
            raise ConfigError(
                "--service-discovery with --pd-disaggregation needs --prefill-selector "
                "and/or --decode-selector"
            )
    elif not parse_selector(cfg.selector, "--selector"):
        raise ConfigError("--service-discovery needs --selector key=value")
