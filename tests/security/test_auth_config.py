"""A config that cannot be served safely, or does not parse, stops `smg launch` at start-up with
one line saying what to set (exit 2), and never echoes a key."""

from __future__ import annotations

import subprocess
import sys

import pytest
from integration.conftest import REPO

pytestmark = pytest.mark.integration  # every case starts `smg launch`

SECRET = "sekrit-value-0123456789"
CASES = [
    (["--tenant-api-key", SECRET], "TENANT:KEY"),
    (["--tenant-api-key", f"bad tenant:{SECRET}"], "tenant id"),
    (["--control-plane-api-keys", f"ops:Ops:root:{SECRET}"], "ROLE must be admin or user"),
    (["--control-plane-api-keys", f"ops:{SECRET}"], "ID:NAME:ROLE:KEY"),
    (
        ["--api-key", SECRET, "--control-plane-api-keys", f"ops:Ops:admin:{SECRET}"],
        "both the data plane and the control plane",
    ),
    (["--jwt-issuer", "https://idp.example"], "--jwt-audience"),
    (["--jwt-issuer", "http://idp.example", "--jwt-audience", "a"], "https://"),
    (
        ["--jwt-issuer", "https://idp", "--jwt-audience", "a", "--jwt-jwks-uri", "http://idp/k"],
        "--jwt-jwks-uri",
    ),
    (["--jwt-role-mapping", "Gateway.Admin=admin"], "--jwt-issuer"),
    (["--jwt-role-mapping", "Gateway.Admin=root"], "IDP_ROLE=admin|user"),
    (["--cors-allowed-origins", "ui.example"], "scheme://host"),
]


@pytest.mark.parametrize(("argv", "says"), CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_bad_auth_config_exits_with_one_line(argv: list[str], says: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "smg", "launch", "--port", "0", "--prometheus-port", "0", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smg: "), proc.stderr
    assert says in lines[0], lines[0]
    assert SECRET not in proc.stderr + proc.stdout
