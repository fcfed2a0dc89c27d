"""How a knob is declared (`knob`), the error a config that cannot be served raises, and the
helpers that walk or change a config tree."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


class ConfigError(ValueError):
    """A config that cannot be served safely or does not parse: `smg launch` exits with it."""


def knob(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    choices: tuple[str, ...] | None = None,
    nargs: str | None = None,
    negations: tuple[str, ...] = (),
    env_aliases: tuple[str, ...] = (),
) -> Any:
    """A config field with its CLI metadata. Mutable defaults must be tuples.

    `aliases` are other names of the flag (the Rust gateway's where they differ); `negations`
    are switches that set a bool knob back to False; `env_aliases` are the Rust gateway's
    environment variables for the knob, read when `SMG_<FLAG>` is unset. `nargs` of a tuple
    knob: "*" (`--flag A B`, the last occurrence wins), "extend" (`--flag A B --flag C` adds up;
    the env var splits on commas and blanks), "extend_csv" (the same, but the env var splits on
    commas only, so values may hold blanks), "append" (`--flag A --flag B`, one value each),
    "append+" (`--flag A B`, repeatable, each occurrence one space-joined entry)."""
    meta = {
        "help": help,
        "flag": flag,
        "aliases": aliases,
        "choices": choices,
        "nargs": nargs,
        "negations": negations,
        "env_aliases": env_aliases,
    }
    return field(default=default, metadata=meta)


def sections(cfg_type: type) -> list[dataclasses.Field[Any]]:
    return list(dataclasses.fields(cfg_type))


def replace_path(cfg: Any, section: str, **changes: Any) -> Any:
    """`replace_path(gw, "retry", retry_max_retries=1)`: a copy with one section changed."""
    return dataclasses.replace(
        cfg, **{section: dataclasses.replace(getattr(cfg, section), **changes)}
    )
