"""structlog setup: console lines by default, JSON lines with `--log-json`.

Filtering happens in the bound logger class (`make_filtering_bound_logger`), so a debug call at
info level returns at once; the request path logs nothing at info, only failures.
"""

from __future__ import annotations

import logging
import sys

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}  # fmt: skip


def _orjson_dumps(obj: object, default: object = None) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure(level: str = "info", json: bool = False) -> None:
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(lvl, logging.WARNING), stream=sys.stderr)
