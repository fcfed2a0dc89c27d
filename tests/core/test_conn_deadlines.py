"""Connection deadlines (pure): timelines of samples, as the sweeper takes them, and the verdict
each one gets."""

from __future__ import annotations

import dataclasses

import pytest

from smg.core.conn_deadlines import ConnDeadlines, DeadlineLimits, Sample, Verdict

LIMITS = DeadlineLimits(header_timeout_s=10.0, body_timeout_s=5.0, write_timeout_s=8.0)
IDLE = Sample(
    rx=0, requests=0, in_request=False, rx_at_idle=0, reading_body=False, sent=0, buffered=0
)
H, B, W = Verdict.HEADER_TIMEOUT, Verdict.BODY_TIMEOUT, Verdict.WRITE_STALL


def s(**changes: object) -> Sample:
    return dataclasses.replace(IDLE, **changes)  # type: ignore[arg-type]


def run(timeline: list[tuple[float, Sample]], limits: DeadlineLimits = LIMITS) -> list[object]:
    """The verdict of every sample in `timeline` ((now, sample) pairs), the connection having
    opened at t=0."""
    watch = ConnDeadlines(limits, 0.0)
    return [watch.observe(sample, now) for now, sample in timeline]


# fmt: off
CASES = {
    "a new connection that sends nothing owes its headers from the start": (
        [(t, IDLE) for t in (1, 9.9, 10)], [None, None, H]),
    "an idle kept-alive connection is not the header rule's business (keep-alive closes it)": (
        [(1, s(rx=10, requests=1, in_request=True)),
         *[(t, s(rx=10, requests=1, rx_at_idle=10)) for t in (2, 30, 300)]],
        [None, None, None, None]),
    "slowloris: a byte now and then, never a whole header": (
        [(1, s(rx=3)), (5, s(rx=4)), (9.9, s(rx=5)), (10, s(rx=6))], [None, None, None, H]),
    "a header that completes in time starts a request": (
        [(1, s(rx=3)), (9, s(rx=300, requests=1, in_request=True)), (40, s(rx=300, requests=1,
         in_request=True))], [None, None, None]),
    "the header clock restarts with the next request's first byte": (
        [(1, s(rx=10, requests=1, in_request=True)), (2, s(rx=10, requests=1, rx_at_idle=10)),
         (50, s(rx=10, requests=1, rx_at_idle=10)), (51, s(rx=12, requests=1, rx_at_idle=10)),
         (60, s(rx=13, requests=1, rx_at_idle=10)), (61, s(rx=14, requests=1, rx_at_idle=10))],
        [None, None, None, None, None, H]),
    "a fast request between two samples does not inherit an old header clock": (
        [(1, s(rx=3)), (9, s(rx=500, requests=1, rx_at_idle=400)),
         (12, s(rx=500, requests=1, rx_at_idle=400)), (19, s(rx=500, requests=1, rx_at_idle=400))],
        [None, None, None, H]),
    "a stalled body": (
        [(1, s(rx=100, requests=1, in_request=True, reading_body=True)),
         (3, s(rx=200, requests=1, in_request=True, reading_body=True)),
         (7.9, s(rx=200, requests=1, in_request=True, reading_body=True)),
         (8, s(rx=200, requests=1, in_request=True, reading_body=True))], [None, None, None, B]),
    "a body read after a long wait for budget gets its full deadline": (
        [(1, s(rx=100, requests=1, in_request=True)),
         (60, s(rx=100, requests=1, in_request=True)),
         (61, s(rx=100, requests=1, in_request=True, reading_body=True)),
         (65.9, s(rx=100, requests=1, in_request=True, reading_body=True)),
         (66, s(rx=100, requests=1, in_request=True, reading_body=True))],
        [None, None, None, None, B]),
    "a handler that is not reading its body is never cut for it": (
        [(1, s(rx=100, requests=1, in_request=True)), (500, s(rx=100, requests=1,
         in_request=True))], [None, None]),
    "a client that stops reading a stream": (
        [(1, s(requests=1, in_request=True, sent=1000)),
         (2, s(requests=1, in_request=True, sent=5000, buffered=100)),
         (9.9, s(requests=1, in_request=True, sent=5000, buffered=900)),
         (10, s(requests=1, in_request=True, sent=5000, buffered=900))], [None, None, None, W]),
    "a slow reader keeps going as long as it takes some bytes": (
        [(t, s(requests=1, in_request=True, sent=1000 * t, buffered=60_000)) for t in
         range(1, 40, 5)], [None] * 8),
    "nothing buffered: nothing to stall on, however long the stream is quiet": (
        [(t, s(requests=1, in_request=True, sent=7)) for t in (1, 100, 1000)], [None] * 3),
    "bytes stuck after the response ended (a closing connection) still stall": (
        [(1, s(requests=1, rx_at_idle=0, sent=10, buffered=5)),
         (9, s(requests=1, rx_at_idle=0, sent=10, buffered=5))], [None, W]),
}
# fmt: on


@pytest.mark.parametrize("name", list(CASES))
def test_timeline(name: str) -> None:
    timeline, expected = CASES[name]
    assert run(timeline) == expected


def test_a_zero_limit_turns_its_deadline_off() -> None:
    off = DeadlineLimits(header_timeout_s=0, body_timeout_s=0, write_timeout_s=0)
    timeline = [
        (1.0, s(rx=3)),
        (1000.0, s(rx=3)),
        (2000.0, s(rx=3, requests=1, in_request=True, reading_body=True)),
        (3000.0, s(rx=3, requests=1, in_request=True, reading_body=True, buffered=9)),
        (9000.0, s(rx=3, requests=1, in_request=True, reading_body=True, buffered=9)),
    ]
    assert run(timeline, off) == [None] * 5


def test_sampling_more_often_only_finds_the_stall_sooner() -> None:
    """The stall clock runs from the last sample that saw progress, however often it looks."""
    moving = s(requests=1, in_request=True, sent=500)
    stalled = s(requests=1, in_request=True, sent=500, buffered=64)
    coarse = run([(1.0, moving), (1.5, stalled), (9.5, stalled)])
    fine = run([(1.0, moving)] + [(1.5 + 0.5 * i, stalled) for i in range(16)])
    assert coarse == [None, None, W]
    assert fine == [None] * 16 + [W]  # at 9.0 s: 8 s after the last sample that saw progress
