"""The StatefulSet's start-up step, run under /bin/sh as the container would: it resolves the
headless Service (here `localhost`, the one name every machine resolves), drops the pod's own
address, and execs smg with the rest as --join; smg's parser takes the result. A stub `smg` on
PATH prints its arguments. Processes: the integration tier."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .smg_args import check_smg_command
from .test_kubernetes import SCRIPT, SMG_ARGV, STS, _pod_env

pytestmark = pytest.mark.integration


def run_step(tmp_path: Path, pod_ip: str, tries: int = 2) -> list[str]:
    stub = tmp_path / "smg"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    stub.chmod(0o755)
    script = SCRIPT.replace(
        f"getent ahostsv4 {STS['spec']['serviceName']} ", "getent ahostsv4 localhost "
    )
    script = script.replace("$(seq 60)", f"$(seq {tries})")
    run = subprocess.run(
        ["/bin/sh", "-c", script, "smg", *SMG_ARGV],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "POD_IP": pod_ip},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_the_step_joins_the_other_pods_and_smg_parses_it(tmp_path: Path) -> None:
    argv = run_step(tmp_path, pod_ip="10.0.0.9")
    assert argv[: len(SMG_ARGV)] == SMG_ARGV
    assert argv[len(SMG_ARGV) :] == ["--join", "127.0.0.1:39527"]
    _, cfg = check_smg_command(argv, _pod_env(0))
    assert cfg.mesh.mesh_peer_urls == ("127.0.0.1:39527",)


def test_a_pod_alone_starts_without_joining(tmp_path: Path) -> None:
    assert run_step(tmp_path, pod_ip="127.0.0.1") == SMG_ARGV  # only itself: no --join
