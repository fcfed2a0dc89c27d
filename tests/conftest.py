"""Suite-wide hooks: every test gets exactly one tier (unit, integration, chaos; the rule is in
support/tiers.py), and a unit test that starts a process fails, naming the tier it belongs to.
Importing support.examples registers the `fast` hypothesis profile before the plugin loads it."""

from __future__ import annotations

from collections.abc import Generator

import pytest
import support.examples  # noqa: F401  (registers the `fast` profile)
from support.tiers import assign, processes_refused, tiers_of


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assign(config, items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    if tiers_of(item) != ["unit"]:
        return (yield)
    with processes_refused(item.nodeid):
        return (yield)
