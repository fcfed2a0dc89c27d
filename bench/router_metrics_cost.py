"""CPU-µs per request of the router's metrics (smg.metrics.router), in process.

What `Flow.serve` and the renderer add to one streamed gRPC request: a `RequestProbe`, the
context variable set and reset, the first-batch time, the usage read at the end, and `done`
(one counter, four histograms, two token counters through cached label children). Compared
with the same loop doing nothing, so the figure is the metrics' own cost.

    .venv/bin/python bench/router_metrics_cost.py [--n 200000]
"""

from __future__ import annotations

import argparse
import time

from prometheus_client import CollectorRegistry

from smg.metrics import DURATION_BUCKETS
from smg.metrics.router import CURRENT, Declare, RequestProbe, RouterMetrics, answered


class _Choice:
    completion_tokens = 64


class _Renderer:
    prompt_tokens = 20
    choices = [_Choice()]


def _with_metrics(n: int, m: RouterMetrics) -> float:
    now = time.perf_counter
    renderer = _Renderer()
    t0 = time.process_time()
    for _ in range(n):
        probe = RequestProbe(now, "chat", True)
        token = CURRENT.set(probe)
        probe.model, probe.router_type, probe.connection_mode = "m", "grpc", "grpc"
        p = CURRENT.get()
        if p is not None and p.first_at is None:
            p.first_at = now()
        answered(probe, renderer)
        CURRENT.reset(token)
        m.done(probe, now(), None)
    return time.process_time() - t0


def _baseline(n: int) -> float:
    now = time.perf_counter
    t0 = time.process_time()
    for _ in range(n):
        now()
        now()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    m = RouterMetrics(Declare(CollectorRegistry(), DURATION_BUCKETS))
    _with_metrics(1000, m)  # the label children made
    runs = [(_with_metrics(args.n, m) - _baseline(args.n)) * 1e6 / args.n for _ in range(5)]
    runs.sort()
    print(f"router metrics: {runs[2]:.2f} CPU-us per request (median of 5, n={args.n})")


if __name__ == "__main__":
    main()
