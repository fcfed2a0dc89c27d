"""scripts/setup.sh (which scripts/dev.sh and scripts/test.sh run first) refuses a host without
Python >= 3.11 or its venv module and says what to install, before it touches anything. The
scripts run from a copy, against fake pythons on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs bash and (fake) pythons

ROOT = Path(__file__).resolve().parents[2]


def fake_python(bindir: Path, name: str, version: str, venv: bool = True) -> Path:
    """A `python` that answers the version query with `version` and `-m venv` as told."""
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(
        "#!/bin/sh\n"
        f'case "$1 $2" in\n'
        f"  '-m venv') {'exit 0' if venv else 'echo No module named venv >&2; exit 1'} ;;\n"
        "  '-c import ensurepip') exit 0 ;;\n"
        f"  -c*) echo {version} ;;\n"
        "  *) echo 'fake python: unexpected call' >&2; exit 99 ;;\n"
        "esac\n"
    )
    path.chmod(0o755)
    return path


def run(tmp_path: Path, script: str, bindir: Path, *args: str, python: str | None = None):
    tree = tmp_path / "tree"
    if not tree.exists():
        shutil.copytree(ROOT / "scripts", tree / "scripts")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    if python is not None:
        env["PYTHON"] = python
    proc = subprocess.run(
        ["bash", str(tree / "scripts" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not (tree / ".venv").exists()  # refused before making anything
    return proc


@pytest.mark.parametrize("script", ["setup.sh", "dev.sh", "test.sh"])
def test_an_old_python_is_refused_saying_what_to_install(tmp_path: Path, script: str) -> None:
    bindir = tmp_path / "bin"
    fake_python(bindir, "python3", "3.9")
    proc = run(tmp_path, script, bindir)
    assert proc.returncode == 1, proc
    assert "'python3' is Python 3.9; smg needs Python >= 3.11" in proc.stderr
    assert "apt-get install python3 python3-venv" in proc.stderr
    assert proc.stdout == ""


def test_python_from_the_environment_is_the_one_checked(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    fake_python(bindir, "python3", "3.12")
    old = fake_python(bindir, "python3.10", "3.10")
    proc = run(tmp_path, "setup.sh", bindir, "--check", python=str(old))
    assert proc.returncode == 1
    assert f"'{old}' is Python 3.10; smg needs Python >= 3.11" in proc.stderr
    assert run(tmp_path, "setup.sh", bindir, "--check").returncode == 0  # python3 is 3.12


def test_python_without_venv_is_refused_saying_what_to_install(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    fake_python(bindir, "python3", "3.11", venv=False)
    proc = run(tmp_path, "dev.sh", bindir)
    assert proc.returncode == 1
    assert "Python 3.11 has no working venv module" in proc.stderr
    assert "apt-get install python3-venv (or python3.11-venv)" in proc.stderr


def test_no_python_at_all_is_refused(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    proc = run(tmp_path, "setup.sh", bindir, python="python3.99-missing")
    assert proc.returncode == 1
    assert "no 'python3.99-missing' found; smg needs Python >= 3.11" in proc.stderr


def test_garbage_from_python_is_refused(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    fake_python(bindir, "python3", "Python-ish")
    proc = run(tmp_path, "setup.sh", bindir, "--check")
    assert proc.returncode == 1
    assert "smg needs Python >= 3.11" in proc.stderr


def test_this_python_passes_the_check(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    proc = run(tmp_path, "setup.sh", bindir, "--check", python=sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert os.access(ROOT / "scripts" / "setup.sh", os.X_OK)
