#!/usr/bin/env python3
"""CPU-µs per request of the tracing seam (smg/tracing.py) with tracing off: every call the
request path makes into it (stages, annotations, metadata, first token), next to an empty
function, plus the structlog request-id binding the edge does on every request. Off must build
no span: the stage objects are checked to be the one shared no-op.

    .venv/bin/python bench/trace_overhead.py              # ~5 s
    .venv/bin/python bench/trace_overhead.py --n 500000   # steadier
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog

from smg import tracing


def request_path() -> None:
    """The seam's calls for one single-worker gRPC request, in the flow's order."""
    tracing.enabled()
    tracing.annotate("gen_ai.request.model", "m")
    with tracing.stage("queueing"):
        pass
    with tracing.stage("template_tokenize"):
        pass
    with tracing.stage("select_worker"):
        pass
    with tracing.stage("dispatch", "server.address", "grpc://e:1"):
        tracing.grpc_metadata()
    tracing.annotate("smg.worker.url", "grpc://e:1")
    tracing.annotate("smg.attempts", 1)
    tracing.first_token()
    with tracing.stage("stream"):
        pass


def bind_request_id() -> None:
    bound = structlog.contextvars.bind_contextvars(request_id="chatcmpl-0123456789")
    structlog.contextvars.reset_contextvars(**bound)


def empty() -> None:
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    assert not tracing.enabled()
    assert tracing.stage("a") is tracing.stage("b", "k", "v")  # no span objects when off
    for fn in (request_path, bind_request_id, empty):
        best = min(timeit.repeat(fn, number=args.n, repeat=args.reps)) / args.n
        print(f"{fn.__name__:16} {best * 1e6:6.2f} µs")


if __name__ == "__main__":
    main()
