"""`smg launch --prometheus-duration-buckets` refused in one line, exit 2 (a real process)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_smg_launch_refuses_bad_buckets_in_one_line() -> None:
    """In a child process: `smg.cli.main` configures the process's logging."""
    import subprocess
    import sys

    argv = ["launch", "--host", "127.0.0.1", "--port", "0"]
    out = subprocess.run(
        [sys.executable, "-m", "smg", *argv, "--prometheus-duration-buckets", "2", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    last = out.stderr.strip().splitlines()[-1]
    assert last == "smg: error: --prometheus-duration-buckets: the bounds must be ascending"
