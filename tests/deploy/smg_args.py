"""What the deployment files hand to smg, checked by smg itself: the command line parses with
smg's own parser (a renamed or removed flag fails here), the configuration builds and passes the
gateway's start-up checks, and no listener beyond loopback is left without a credential."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from smg.cli import gateway_config_from, parse
from smg.config import GatewayConfig, replace_path
from smg.core.auth import Gate

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

# stand-ins for the secrets an operator provides (each long enough for its check)
SECRETS = {
    "SMG_CLUSTER_KEY": "cluster-key-0123456789abcdef",
    "SMG_API_KEY": "client-key-0123456789",
    "SMG_METRICS_KEY": "metrics-key-0123456789",
}


def load_all(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


@contextmanager
def smg_environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` as the only SMG_* variables (smg reads them while building its parser)."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("SMG_")]:
        del os.environ[name]
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_smg_command(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, Any]:
    """Parses `argv` (a container's command after the `smg` entry point) with `env` as smg sees
    them. For a gateway: builds its config, runs the gateway's constructor checks, and asserts
    that every listener beyond loopback has a credential. Returns (command, the config the
    gateway runs with (e.g. IGW on with discovery) or the namespace).
    """
    from smg.app.gateway import Gateway  # the composition root: only when a test needs it

    smg_env = {k: v for k, v in env.items() if k.startswith("SMG_")}
    with smg_environment(smg_env):
        command, ns = parse(list(argv))
        if command not in ("launch", "node"):
            return command, ns
        cfg: GatewayConfig = gateway_config_from(ns)
    if command == "node":
        cfg = replace_path(cfg, "mesh", enable_mesh=True)
    cfg = Gateway(cfg).cfg  # ConfigError on a config the gateway would refuse at start-up
    obs = cfg.observability
    metrics_host = (obs.prometheus_host or cfg.server.host) if obs.prometheus_port > 0 else None
    assert Gate.from_config(cfg).exposure(cfg.server.host, metrics_host) == []
    return command, cfg


_VAR = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` over strings, lists and maps;
    a required variable missing from `env` raises KeyError."""
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            name, op, arg = m.group(1), m.group(2), m.group(3)
            if env.get(name):
                return env[name]
            if op == "-":
                return arg
            raise KeyError(f"{name}: {arg}" if op == "?" else name)

        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The word after `flag` in a command line (None when it is absent)."""
    args = list(argv)
    return args[args.index(flag) + 1] if flag in args else None
