"""The discovery flags: parsed as the Rust gateway parses them, refused when they cannot work,
and discovery turns IGW mode on."""

from __future__ import annotations

import pytest

from smg.app.discovery import discovery_rules, with_discovery
from smg.cli import gateway_config_from, parse
from smg.config import ConfigError, GatewayConfig


def cfg(*argv: str) -> GatewayConfig:
    _, ns = parse(["launch", *argv])
    return gateway_config_from(ns)


def test_flags_reach_the_rules_and_igw_turns_on() -> None:
    c = with_discovery(
        cfg(
            "--service-discovery",
            "--selector", "app=sglang", "tier=gpu",
            "--service-discovery-port", "8001",
            "--service-discovery-namespace", "llm",
            "--model-id-from", "label:model",
        )
    )  # fmt: skip
    assert c.routing.enable_igw
    rules = discovery_rules(c)
    assert rules.selector == {"app": "sglang", "tier": "gpu"} and rules.port == 8001
    assert rules.model_id_from == ("label", "model") and rules.scheme == ""  # detected
    assert c.discovery.service_discovery_namespace == "llm"


def test_discovery_provider_kubernetes_is_the_same_switch_and_grpc_workers_set_the_scheme() -> None:
    c = with_discovery(
        cfg("--discovery-provider", "kubernetes", "--selector", "a=b",
            "--worker-urls", "grpc://127.0.0.1:5")
    )  # fmt: skip
    assert c.routing.enable_igw and discovery_rules(c).scheme == "grpc"


def test_without_discovery_nothing_changes() -> None:
    c = cfg("--selector", "a=b")
    assert with_discovery(c) == c


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--service-discovery"], "--selector"),
        (["--service-discovery", "--selector", "novalue"], "not key=value"),
        (["--service-discovery", "--selector", "a=b", "--model-id-from", "pod"], "model-id-from"),
        (["--service-discovery", "--selector", "a=b", "--model-id-from", "label:"], "key name"),
        (
            ["--service-discovery", "--discovery-provider", "kubernetes", "--selector", "a=b"],
            "not both",
        ),
        (["--service-discovery", "--pd-disaggregation", "--selector", "a=b"], "prefill-selector"),
        (["--service-discovery", "--selector", "a=b", "--service-discovery-port", "0"], "1-65535"),
    ],
)
def test_unusable_flags_stop_the_start(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        with_discovery(cfg(*argv))


def test_pd_roles_from_selectors() -> None:
    c = with_discovery(
        cfg("--service-discovery", "--pd-disaggregation",
            "--prefill-selector", "app=s", "role=prefill",
            "--decode-selector", "app=s", "role=decode")
    )  # fmt: skip
    rules = discovery_rules(c)
    assert rules.pd and rules.prefill_selector == {"app": "s", "role": "prefill"}


def test_the_kubernetes_client_is_imported_only_with_discovery_on() -> None:
    """kubernetes_asyncio costs ~1 s of imports: no module imports it (or kube_pods, which
    does) at module level except kube_pods itself, so a gateway without discovery never pays."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "smg"
    heavy = ("kubernetes_asyncio", "smg.actors.kube_pods")
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "kube_pods.py":
            continue
        for node in ast.parse(path.read_text()).body:  # module level only
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == h or n.startswith(h + ".") for n in names for h in heavy):
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
