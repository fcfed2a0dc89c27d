"""`smg launch --mcp-config-path`: a `required: true` MCP server that cannot be reached stops the
start (exit 2, one line naming the server, never its URL or token); a server that is not
required and down is only a warning, and the gateway serves."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .spawn import SERVER, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", "0"]
LAUNCH += ["--prometheus-port", "0"]


def _config(tmp_path: Path, *, required: bool) -> Path:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    path = tmp_path / "mcp.yaml"
    path.write_text(
        "servers:\n"
        # the stdio server is a Python process importing the mcp SDK: on a loaded box (the
        # parallel suite) it can take longer than the default 10 s to answer its handshake
        f"  - {{name: local, protocol: stdio, command: {sys.executable}, args: [{SERVER}, stdio],"
        " required: true, connect_timeout_secs: 60}\n"
        f"  - {{name: search, protocol: streamable, url: '{down}', token: '${{SEARCH_TOKEN}}',"
        f" required: {'true' if required else 'false'}, connect_timeout_secs: 5}}\n"
    )
    return path


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "SEARCH_TOKEN": "tok-SECRET"}


def test_a_required_server_down_stops_the_start(tmp_path: Path) -> None:
    path = _config(tmp_path, required=True)
    out = subprocess.run(
        [*LAUNCH, "--mcp-config-path", str(path)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "smg: error: required MCP server unreachable at start: MCP server 'search': "
    ), last
    assert "'local'" not in last
    assert "tok-SECRET" not in out.stderr + out.stdout and "/mcp" not in last


def test_an_optional_server_down_only_warns_and_the_gateway_serves(tmp_path: Path) -> None:
    path = _config(tmp_path, required=False)
    log = tmp_path / "gateway.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [*LAUNCH, "--mcp-config-path", str(path)],
            cwd=REPO, env=_env(), stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while "gateway_listening" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = log.read_text()
    assert "MCP server 'search'" in text and "tok-SECRET" not in text
