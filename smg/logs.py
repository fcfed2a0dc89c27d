"""structlog setup: console lines by default, JSON lines with `--log-json`;
with `--log-dir` every line also goes to daily files there (smg/log_files.py).

Filtering happens in the bound logger class (`make_filtering_bound_logger`), so a debug call at
info level returns at once; the request path logs nothing at info, only failures.
"""

from __future__ import annotations

import atexit
import logging
import sys

import orjson
import structlog

from smg.log_files import DailyFiles

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}  # fmt: skip


def _orjson_dumps(obj: object, default: object = None) -> str:
    return orjson.dumps(obj, default=str).decode()


class _Tee:
    """structlog's logger: each rendered line to stderr and, with `--log-dir`, to the files."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        files = _files
        if files is not None:
            files.write(message)

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


_files: DailyFiles | None = None


def configure(level: str = "info", json: bool = False, log_dir: str | None = None) -> None:
    global _files
    if _files is not None:
        _files.close()
    _files = DailyFiles(log_dir) if log_dir else None
    if _files is not None:
        atexit.register(close)
    lvl = _LEVELS.get(level.lower(), logging.INFO)
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=lambda *_: _Tee(),
        cache_logger_on_first_use=True,
    )
    # libraries' stdlib records (aiohttp, grpc, the OTLP exporter) become structured lines too,
    # on stderr and in the files, with the request's ids when one is being served
    logging.basicConfig(level=max(lvl, logging.WARNING), handlers=[_Stdlib()])


class _Stdlib(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            logger = structlog.get_logger().bind(logger=record.name)
            logger.log(record.levelno, record.getMessage(), exc_info=record.exc_info)
        except Exception:
            self.handleError(record)


def close() -> None:
    """Flush and stop the log files' writer (at exit)."""
    global _files
    files, _files = _files, None
    if files is not None:
        files.close()
