"""Counters and histograms for the request path: plain attribute arithmetic, no locks.

prometheus_client's `Counter.inc` takes a lock (~1-2 µs here) and `Histogram.observe` a lock per
bucket walk (~4-7 µs); a streamed request observes four histograms and three counters. Every
observation here comes from the event loop's thread, so a child is two floats and a list of
bucket counts: `observe` is a `bisect` and two additions (~0.3 µs). The families are rendered at
scrape time as prometheus_client renders its own (same names, `le` strings, `_total` suffix).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Family(Collector):
    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.label_names = name, doc, list(labels)
        self.children: dict[tuple[str, ...], object] = {}

    def _key(self, values: tuple[str, ...]) -> tuple[str, ...]:
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name}: labels {self.label_names}, got {values}")
        return values


class FastCounter(_Family):
    def labels(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[self._key(values)] = CounterChild()
        assert isinstance(child, CounterChild)
        return child

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def collect(self) -> Iterator[CounterMetricFamily]:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.label_names)
        for values, child in list(self.children.items()):
            assert isinstance(child, CounterChild)
            fam.add_metric(list(values), child.value)
        yield fam


class FastHistogram(_Family):
    def __init__(
        self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, doc, labels)
        self.bounds = tuple(float(b) for b in buckets if b != float("inf"))
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]

    def labels(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[self._key(values)] = HistogramChild(self.bounds)
        assert isinstance(child, HistogramChild)
        return child

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.label_names)
        for values, child in list(self.children.items()):
            assert isinstance(child, HistogramChild)
            running, buckets = 0, []
            for le, n in zip(self._les, child.counts, strict=True):
                running += n
                buckets.append((le, running))
            fam.add_metric(list(values), buckets, child.sum)
        yield fam
