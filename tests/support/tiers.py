"""The three test tiers and the rule that gives every collected test exactly one.

- `integration`: real processes, or sockets to other processes: everything under
  tests/integration/, and any test that takes a process fixture (`launch`, `module_launch`).
- `chaos`: fault injection, hostile load and long seeded simulations; marked explicitly
  (`pytestmark = pytest.mark.chaos` in a file, or on a test or parameter), since neither folder
  nor fixture tells them apart.
- `unit`: everything else (in-process, no other process); `pytest -m unit` is the fast tier.

An explicit tier mark wins over the rule; tests/conftest.py applies `default_tier` to the rest.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "integration", "chaos")
PROCESS_FIXTURES = frozenset({"launch", "module_launch"})
INTEGRATION_DIR = Path(__file__).resolve().parents[1] / "integration"
COLLECTED = pytest.StashKey[tuple[pytest.Item, ...]]()


def tiers_of(item: pytest.Item) -> list[str]:
    """The distinct tier marks on `item` (its own, its class's, its module's), in TIERS order."""
    return [tier for tier in TIERS if item.get_closest_marker(tier) is not None]


def default_tier(item: pytest.Item) -> str:
    """The tier of a test that carries no explicit tier mark."""
    if INTEGRATION_DIR in item.path.parents:
        return "integration"
    if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return "integration"
    return "unit"


def assign(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every unmarked item with its default tier; remember all items (before `-m`)."""
    for item in items:
        if not tiers_of(item):
            item.add_marker(default_tier(item))
    config.stash[COLLECTED] = tuple(items)


class ProcessInUnitTest(AssertionError):
    """A unit test started a process: it belongs to the integration tier."""


@contextlib.contextmanager
def processes_refused(nodeid: str) -> Iterator[None]:
    """While open, starting a subprocess (also through asyncio) raises ProcessInUnitTest."""

    def refuse(self: subprocess.Popen[Any], args: Any, *_: Any, **__: Any) -> None:
        raise ProcessInUnitTest(
            f"{nodeid} runs {args!r}: a unit test starts no process; "
            "mark it `pytest.mark.integration` (or give it the `launch` fixture)"
        )

    original = subprocess.Popen.__init__
    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
