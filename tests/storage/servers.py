"""Real servers for the storage suite, started by the test run: PostgreSQL (initdb + pg_ctl in a
temp dir, a free loopback port, trust auth on loopback; as the `postgres` user when the run is
root, since initdb refuses root) and redis-server (no persistence, a temp dir). Also a blackhole:
a socket that accepts and never answers, to prove every call has a timeout."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from support.listening import listening
from support.ports import free_port

STARTUP_TIMEOUT_S = 30.0


def _as_postgres_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL; yields the URL of its `postgres` database."""
    tmp = Path(tempfile.mkdtemp(prefix="smg-pg-"))
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    data = tmp / "data"
    subprocess.run(
        _as_postgres_user(["initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-N"]),
        check=True, capture_output=True, timeout=STARTUP_TIMEOUT_S,
    )  # fmt: skip
    port = free_port()
    opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_postgres_user(["pg_ctl", "-D", str(data), "-o", opts, "-l", str(tmp / "log"),
                           "-w", "-t", str(int(STARTUP_TIMEOUT_S)), "start"]),
        check=True, capture_output=True, timeout=STARTUP_TIMEOUT_S + 5,
    )  # fmt: skip
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres_user(["pg_ctl", "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True, timeout=STARTUP_TIMEOUT_S,
        )  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A running redis-server on a free loopback port; yields its URL."""
    tmp = tempfile.mkdtemp(prefix="smg-redis-")
    port = free_port()
    argv = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
        "--appendonly", "no", "--dir", tmp,
    ]  # fmt: skip
    try:
        with listening(argv, port, STARTUP_TIMEOUT_S):
            yield f"redis://127.0.0.1:{port}/0"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def blackhole() -> Iterator[int]:
    """A loopback port that accepts connections and never answers; yields the port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])
