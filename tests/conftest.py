"""Suite-wide hooks: every test gets exactly one tier (unit, integration, chaos; the rule is in
support/tiers.py), and a unit test that starts a process fails, naming the tier it belongs to.
Importing support.examples registers the `fast` hypothesis profile before the plugin loads it.
Real PostgreSQL and redis servers (storage/servers.py) are session fixtures, started only when a
selected test asks for them (the storage contract suite, stored history end to end); under
pytest-xdist each worker starts its own, on its own ports and temp dirs (support/ports.py).
SMG_TEST_PHASE picks the parallel or the serial phase of scripts/test.sh (support/phases.py)."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest
import support.examples  # noqa: F401  (registers the `fast` profile)
from storage.servers import postgres_server, redis_server
from support.phases import select
from support.tiers import assign, processes_refused, tiers_of


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assign(config, items)
    select(config, items)  # after `assign`: the tier checks still see every collected test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    if tiers_of(item) != ["unit"]:
        return (yield)
    with processes_refused(item.nodeid):
        return (yield)
