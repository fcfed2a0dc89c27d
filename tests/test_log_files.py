"""`--log-dir` files: the Rust gateway's daily names, bounded retention, a writer off the loop."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from smg import log_files
from smg.log_files import DailyFiles, file_name, to_prune

DAY = datetime.datetime(2026, 11, 28, 23, 59, 59, tzinfo=datetime.UTC)


def test_names_are_the_utc_day() -> None:
    assert file_name("smg", DAY) == "smg.2026-11-28"
    later = DAY.astimezone(datetime.timezone(datetime.timedelta(hours=5)))  # 04:59 on the 29th
    assert file_name("smg", later) == "smg.2026-11-28"


@pytest.mark.parametrize(
    ("names", "keep", "pruned"),
    [
        ([], 7, []),
        (["smg.2026-11-01", "smg.2026-11-02"], 2, []),
        (["smg.2026-11-03", "smg.2026-11-01", "smg.2026-11-02"], 2, ["smg.2026-11-01"]),
        # other files in the directory are never touched
        (
            ["smg.2026-11-01", "smg.log", "smgx.2026-01-01", "other.2026-01-01"],
            0,
            ["smg.2026-11-01"],
        ),
        (["smg.2026-11-01.gz", "smg.2026-11-02"], 1, []),
    ],
)
def test_pruning_keeps_the_newest(names: list[str], keep: int, pruned: list[str]) -> None:
    assert to_prune("smg", names, keep) == pruned


def test_a_new_day_opens_a_new_file_and_prunes_the_oldest(tmp_path: Path) -> None:
    for day in ("2026-11-20", "2026-11-21", "2026-11-22"):
        (tmp_path / f"smg.{day}").write_text("old\n")
    (tmp_path / "notes.txt").write_text("keep me\n")
    now = [DAY]
    files = DailyFiles(tmp_path, keep=3, now=lambda: now[0])
    try:
        files.write_now('{"event":"a"}')
        now[0] = DAY + datetime.timedelta(seconds=2)  # past midnight
        files.write_now('{"event":"b"}')
    finally:
        files.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "smg.2026-11-22",
        "smg.2026-11-28",
        "smg.2026-11-29",
    ]
    assert (tmp_path / "smg.2026-11-28").read_text() == '{"event":"a"}\n'
    assert (tmp_path / "smg.2026-11-29").read_text() == '{"event":"b"}\n'


def test_the_writer_thread_writes_queued_lines_and_a_full_queue_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = DailyFiles(tmp_path / "new" / "dir", now=lambda: DAY)  # made if missing
    for i in range(100):
        files.write(f"line {i}")
    files.close()
    text = (tmp_path / "new" / "dir" / "smg.2026-11-28").read_text()
    assert text.splitlines() == [f"line {i}" for i in range(100)]
    assert files.dropped == 0

    monkeypatch.setattr(log_files, "QUEUE_LINES", 3)
    stalled = DailyFiles(tmp_path, now=lambda: DAY)
    stalled.close()  # the writer is gone: nothing drains the queue
    for i in range(5):
        stalled.write(f"late {i}")
    assert stalled.dropped == 2  # three queued, two dropped, no blocking


def test_a_log_dir_that_cannot_be_used_stops_the_start_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from smg.cli import main

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    assert main(["launch", "--log-dir", str(not_a_dir), "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err == f"smg: error: --log-dir {not_a_dir}: File exists\n"
