"""smg.metrics.fast renders exactly what prometheus_client's own Counter and Histogram render
for the same observations (names, `_total`, `le` strings, cumulative buckets, sums)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from smg.metrics.fast import FastCounter, FastHistogram

pytestmark = pytest.mark.unit

BOUNDS = (0.001, 0.5, 1, 2.5, 60)
VALUES = (0.0005, 0.001, 0.3, 0.5, 0.9, 1, 7, 60, 61, 1e9)


def samples(text: bytes) -> list[str]:
    return sorted(line for line in text.decode().splitlines() if not line.startswith("# HELP"))


def test_the_same_exposition_as_prometheus_client() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    c = Counter("x_total", "doc", ["a"], registry=theirs)
    h = Histogram("y_seconds", "doc", ["a"], buckets=BOUNDS, registry=theirs)
    fc, fh = FastCounter("x", "doc", ["a"]), FastHistogram("y_seconds", "doc", ["a"], BOUNDS)
    ours.register(fc)
    ours.register(fh)
    for label in ("p", "q"):
        for v in VALUES:
            h.labels(label).observe(v)
            fh.labels(label).observe(v)
        c.labels(label).inc(3)
        fc.labels(label).inc(3)
    assert samples(generate_latest(ours)) == samples(generate_latest(theirs))


def test_a_wrong_label_count_is_refused() -> None:
    with pytest.raises(ValueError, match="labels"):
        FastCounter("x", "doc", ["a", "b"]).labels("only-one")
    with pytest.raises(ValueError, match="labels"):
        FastHistogram("y", "doc", ["a"], BOUNDS).labels()
