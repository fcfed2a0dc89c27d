"""The whole run's two phases (scripts/test.sh): most tests spread over pytest-xdist workers, then
the `serial` ones alone, since they measure time, memory or CPU and must not share the 2 cores.

`SMG_TEST_PHASE=parallel` deselects the `serial` tests, `SMG_TEST_PHASE=serial` keeps only them;
unset, every test runs (a plain `pytest`). An environment variable rather than `-m`, so a `-m`
or `-k` the caller passes still narrows both phases.

The parallel phase also puts the modules that start processes (the integration and chaos tiers)
first: xdist hands out modules in collection order, so the long ones start early and the quick
in-process ones fill the workers at the end instead of a mesh module running alone.
"""

from __future__ import annotations

import os

import pytest

PHASE_ENV = "SMG_TEST_PHASE"
PHASES = ("parallel", "serial")


def is_serial(item: pytest.Item) -> bool:
    return item.get_closest_marker("serial") is not None


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests that belong to the other phase (none when no phase is set)."""
    phase = os.environ.get(PHASE_ENV, "")
    if not phase:
        return
    if phase not in PHASES:
        raise pytest.UsageError(f"{PHASE_ENV}={phase!r}: expected one of {', '.join(PHASES)}")
    want = phase == "serial"
    keep = [item for item in items if is_serial(item) == want]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if is_serial(item) != want])
    if not want:
        keep.sort(key=lambda item: item.get_closest_marker("unit") is not None)  # stable
    items[:] = keep
