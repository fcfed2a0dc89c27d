"""`--log-dir`: log lines also go to daily files, written off the event loop.

Named as the Rust gateway's daily rolling appender names them: `smg.YYYY-MM-DD` (UTC) in the
directory, a new file at the first line of each day. Unlike it, retention is bounded: after a
roll, only the newest `RETENTION_FILES` files of that name are kept. The naming and pruning are
pure (`file_name`, `to_prune`); `DailyFiles` is the thread that writes: the request path only
puts a line on a bounded queue (a full queue drops the line and counts it, so a slow disk never
stalls a request).
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

RETENTION_FILES = 7  # a week of daily files
QUEUE_LINES = 10_000  # lines waiting for the writer before new ones are dropped
_STOP = object()


def file_name(prefix: str, now: datetime.datetime) -> str:
    return f"{prefix}.{now.astimezone(datetime.UTC):%Y-%m-%d}"


def to_prune(prefix: str, names: Iterable[str], keep: int) -> list[str]:
    """The files of `prefix` beyond the newest `keep` (dated names sort by date)."""
    pattern = re.compile(re.escape(prefix) + r"\.\d{4}-\d{2}-\d{2}$")
    dated = sorted(n for n in names if pattern.fullmatch(n))
    return dated[: max(0, len(dated) - keep)]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class DailyFiles:
    def __init__(
        self,
        directory: str | Path,
        prefix: str = "smg",
        keep: int = RETENTION_FILES,
        now: Callable[[], datetime.datetime] = _utc_now,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.prefix, self.keep, self.now = prefix, keep, now
        self.dropped = 0
        self._queue: queue.Queue[object] = queue.Queue(QUEUE_LINES)
        self._name = ""
        self._file: object = None
        self._roll(file_name(prefix, now()))  # a directory we cannot write to fails here, at start
        self._thread = threading.Thread(target=self._run, name="smg-log-files", daemon=True)
        self._thread.start()

    def write(self, line: str) -> None:
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued, then stop the writer (waiting at most `timeout_s`)."""
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout_s)
        self._thread.join(timeout_s)

    def write_now(self, line: str) -> None:
        """Append `line` to today's file (the writer thread's side; rolls and prunes)."""
        name = file_name(self.prefix, self.now())
        if name != self._name:
            self._roll(name)
        f = self._file
        assert f is not None
        f.write(line + "\n")  # type: ignore[attr-defined]

    def _roll(self, name: str) -> None:
        if self._file is not None:
            self._file.close()  # type: ignore[attr-defined]
        self._name = name
        self._file = open(self.dir / name, "a", encoding="utf-8", buffering=1)
        for old in to_prune(self.prefix, (p.name for p in self.dir.iterdir()), self.keep):
            with contextlib.suppress(OSError):
                (self.dir / old).unlink()

    def _run(self) -> None:
        while True:
            line = self._queue.get()
            if line is _STOP:
                break
            try:
                self.write_now(line)  # type: ignore[arg-type]
            except OSError:
                self.dropped += 1
        if self._file is not None:
            self._file.close()  # type: ignore[attr-defined]
