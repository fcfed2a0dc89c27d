"""Loopback ports for the processes a test starts, safe when pytest-xdist runs several workers.

`bind(0)` hands out ephemeral ports, so two workers (or a worker and any outgoing connection on
the box) can be handed the same port between the probe and the child's own bind. Instead every
port comes from a slice of 10000-32767, below Linux's ephemeral range (32768+): the slice of
this xdist worker (`PYTEST_XDIST_WORKER=gwN` of `PYTEST_XDIST_WORKER_COUNT`), the whole range
without xdist. A port is handed out once per walk of the slice, and only if it binds now; the walk
starts at a random offset so concurrent runs in other checkouts rarely meet.
"""

from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 10000, 32768  # [LOW, HIGH): never an ephemeral (outgoing) port


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    span = (HIGH - LOW) // max(count, 1)
    start = LOW + (index % max(count, 1)) * span
    return range(start, start + span)


_SLICE = _slice()
_next = random.randrange(len(_SLICE))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on now, from this worker's slice, not handed out again
    until the slice has been walked once."""
    global _next
    for _ in range(len(_SLICE)):
        port = _SLICE[_next]
        _next = (_next + 1) % len(_SLICE)
        if _bindable(port):
            return port
    raise RuntimeError(f"no free loopback port in {_SLICE.start}-{_SLICE.stop - 1}")
