"""Issue 14's packaging: the distribution name, the licence, the version and the locked
dependencies, read from the files a release is built from."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import smg
from smg.cli import DISTRIBUTION, main, version_line

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCKS = ("runtime.lock", "test.lock")


def requirements(extra: str | None = None) -> list[Requirement]:
    lines = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def pins(lock: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile lock file."""
    text = (ROOT / "requirements" / lock).read_text()
    out: dict[str, tuple[str, list[str]]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[-1].strip()):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", entry.lstrip("#\n "))
        if head is None:
            continue
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
        out[canonicalize_name(head[1])] = (head[2], hashes)
    return out


def test_the_distribution_name_is_not_the_rust_gateways() -> None:
    # `smg` on PyPI is the Rust gateway; the import package and the command stay `smg`
    assert PROJECT["name"] == DISTRIBUTION == "pysmg"
    assert PROJECT["scripts"] == {"smg": "smg.cli:main"}


def test_the_licence_is_apache_2() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0")
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_dependency_has_an_upper_bound() -> None:
    for req in requirements() + requirements("test"):
        ops = {spec.operator for spec in req.specifier}
        assert ops & {"<", "<=", "==", "~="}, f"{req} has no upper bound"


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_pins_every_requirement_within_its_range_with_hashes(lock: str) -> None:
    pinned = pins(lock)
    wanted = requirements() + (requirements("test") if lock == "test.lock" else [])
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in requirements/{lock}"
        assert pinned[name][0] in SpecifierSet(str(req.specifier)), (req, pinned[name][0])
    for name, (_, hashes) in pinned.items():
        assert hashes, f"{name} has no hash in requirements/{lock}"
    assert "pysmg" not in pinned and "smg" not in pinned  # the project itself is installed -e


def test_the_runtime_lock_agrees_with_the_test_lock() -> None:
    runtime, test = pins("runtime.lock"), pins("test.lock")
    assert set(runtime) < set(test)
    assert {name: runtime[name][0] for name in runtime} == {name: test[name][0] for name in runtime}


def test_the_checkout_version_is_the_projects() -> None:
    assert smg.__version__ == PROJECT["version"]


@pytest.mark.parametrize("argv", [["--version"], ["launch", "--version"], ["node", "--version"]])
def test_version_prints_the_distribution_and_its_version(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    installed = importlib.metadata.version("pysmg")
    assert capsys.readouterr().out == f"pysmg {installed}\n"
    assert installed == PROJECT["version"]


def test_version_in_a_checkout_that_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert version_line() == f"pysmg {smg.__version__} (not installed)"
