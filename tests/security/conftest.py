"""The integration suite's process fixtures (real `smg sim` / `smg launch` on loopback), shared.

`tests/` is on sys.path (pytest's rootdir-relative package import), so the integration conftest
is importable as `integration.conftest`; importing its fixtures here registers them for this
folder too.
"""

from __future__ import annotations

from integration.conftest import (  # noqa: F401  (fixtures and the report hook, re-exported)
    launch,
    module_launch,
    pytest_runtest_makereport,
)
