"""Session-scoped real servers for the storage suite (tests/storage/servers.py); started only when
a selected test asks for them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .servers import postgres_server, redis_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url
