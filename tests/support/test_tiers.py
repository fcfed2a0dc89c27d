"""Every collected test has exactly one tier, the rule in support/tiers.py holds for it, and
hypothesis counts follow the loaded profile."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from support.tiers import (
    COLLECTED,
    INTEGRATION_DIR,
    PROCESS_FIXTURES,
    ProcessInUnitTest,
    tiers_of,
)


def collected(request: pytest.FixtureRequest) -> tuple[pytest.Item, ...]:
    """Every test of this session, including those `-m` deselected."""
    items = request.config.stash[COLLECTED]
    assert request.node in items
    return items


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    wrong = [(item.nodeid, tiers_of(item)) for item in collected(request)]
    assert [(nodeid, tiers) for nodeid, tiers in wrong if len(tiers) != 1] == []


def test_no_unit_test_starts_processes(request: pytest.FixtureRequest) -> None:
    wrong = [
        item.nodeid
        for item in collected(request)
        if tiers_of(item) == ["unit"]
        and (
            PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or INTEGRATION_DIR in item.path.parents
        )
    ]
    assert wrong == []


def test_this_test_is_unit(request: pytest.FixtureRequest) -> None:
    assert tiers_of(request.node) == ["unit"]


def test_a_unit_test_cannot_start_a_process() -> None:
    with pytest.raises(ProcessInUnitTest, match=r"mark it `pytest\.mark\.integration`"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


async def test_nor_through_asyncio() -> None:
    with pytest.raises(ProcessInUnitTest):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")


def test_every_hypothesis_count_follows_the_profile() -> None:
    """A literal `max_examples=N` would ignore `--hypothesis-profile=fast`: use examples(N)."""
    tests = Path(__file__).resolve().parents[1]
    literal = [
        f"{path.relative_to(tests)}:{node.lineno}"
        for path in sorted(tests.rglob("*.py"))
        if path.name != "examples.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.keyword)
        and node.arg == "max_examples"
        and isinstance(node.value, ast.Constant)
    ]
    assert literal == []
