"""The idle-read sweeper (pure: ticks are calls) and engine-id rewriting of relayed bodies."""

from __future__ import annotations

import orjson
import pytest

from smg.core.idle import TICKS, IdleSweeper
from smg.pipeline.engine_ids import engine_body, with_engine_ids


def test_a_silent_stream_is_cut_after_the_idle_limit_and_only_then() -> None:
    sweeper = IdleSweeper(8.0)
    assert sweeper.interval_s == 8.0 / TICKS
    cut: list[str] = []
    quiet = sweeper.watch(lambda: cut.append("quiet"))
    busy = sweeper.watch(lambda: cut.append("busy"))
    for _ in range(TICKS - 1):
        busy.progress += 1
        assert sweeper.tick() == 0
    assert cut == [] and not quiet.expired
    busy.progress += 1
    assert sweeper.tick() == 1  # TICKS silent ticks in a row: cut
    assert cut == ["quiet"] and quiet.expired and not busy.expired
    assert len(sweeper) == 1  # the cut watch is gone; the busy one stays
    for _ in range(10 * TICKS):  # a stream that moves at least once per idle limit lives on
        busy.progress += 1
        for _ in range(TICKS - 1):
            sweeper.tick()
    assert cut == ["quiet"]
    sweeper.release(busy)
    assert len(sweeper) == 0 and sweeper.tick() == 0


def test_progress_resets_the_count() -> None:
    sweeper = IdleSweeper(1.0)
    cut: list[int] = []
    w = sweeper.watch(lambda: cut.append(1))
    for _ in range(TICKS - 1):
        sweeper.tick()
    w.progress += 1
    for _ in range(TICKS):
        sweeper.tick()  # the first of these sees the progress; then TICKS - 1 silent ones
    assert cut == []
    sweeper.tick()
    assert cut == [1]


def test_no_limit_is_no_sweeper() -> None:
    with pytest.raises(ValueError):
        IdleSweeper(0.0)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"model": "m"}, None),
        ({"rid": "victim"}, {"rid": "gw-1"}),
        ({"rid": ["a", "b", "c"]}, {"rid": ["gw-1-0", "gw-1-1", "gw-1-2"]}),
        ({"rid": None, "text": ["x", "y"]}, {"text": ["x", "y"]}),
        ({"request_id": "victim", "x": 1}, {"request_id": "gw-1", "x": 1}),
    ],
)
def test_client_chosen_engine_ids_are_replaced(
    body: dict[str, object], expected: dict[str, object] | None
) -> None:
    before = dict(body)
    assert with_engine_ids(body, "gw-1") == expected
    assert body == before  # never modified in place


def test_engine_body_keeps_the_bytes_when_nothing_changes() -> None:
    raw = b'{"model":"m", "prompt":"hi"}'
    assert engine_body(raw, orjson.loads(raw), "gw-1") is raw
    raw = b'{"model":"m","rid":"other-users-id"}'
    assert orjson.loads(engine_body(raw, orjson.loads(raw), "gw-1")) == {
        "model": "m",
        "rid": "gw-1",
    }


def test_a_busy_reader_is_never_idle() -> None:
    # the reader is blocked writing to a slow client: the worker is not to blame
    sweeper = IdleSweeper(1.0)
    cut: list[int] = []
    w = sweeper.watch(lambda: cut.append(1))
    w.busy = True
    for _ in range(10 * TICKS):
        sweeper.tick()
    assert cut == [] and not w.expired
    w.busy = False  # back to waiting on the worker: a whole idle limit of silence cuts
    for _ in range(TICKS):
        sweeper.tick()
    assert cut == [1] and w.expired
