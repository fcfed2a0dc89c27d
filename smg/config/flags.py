"""The `smg` flags and `SMG_*` environment variables, generated from the config tree.

Each field of a config section with a `help` becomes a flag (its name, or `metadata["flag"]`,
with aliases and the Rust gateway's negations) whose default an environment variable
`SMG_<FLAG>` overrides; an explicit flag wins. The Rust gateway's flags that smg does not serve
yet (`not_yet.NOT_YET`) parse as it parses them and are noted, so the command line can refuse
them by name. `smg.cli` builds its parsers from these.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from typing import Any

from smg.config import GatewayConfig
from smg.config.not_yet import ANY, NOT_YET, NOT_YET_VALUES, ONE, SOME, NotYet


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _env_name(flag: str) -> str:
    return "SMG_" + flag.lstrip("-").replace("-", "_").upper()


def _base_type(tp: Any) -> tuple[type, bool]:
    """(scalar type, optional?) of an annotation like `int`, `str | None`, `tuple[str, ...]`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0])[0], True
    if origin is tuple:
        return tuple, False
    return tp, False


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


class _Extend(argparse.Action):
    """A repeatable list flag: `--flag A B --flag C` is (A, B, C). The first occurrence replaces
    the default (an env var's value), as every other explicit flag does."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest)
        kept = () if current is self.default else tuple(current)
        setattr(namespace, self.dest, (*kept, *values))


NOT_YET_DEST = "_not_yet"


def _note_not_yet(namespace: argparse.Namespace, given: str) -> None:
    seen = getattr(namespace, NOT_YET_DEST, None) or []
    setattr(namespace, NOT_YET_DEST, [*seen, given])


class _NotYetFlag(argparse.Action):
    """A Rust-gateway flag smg does not serve yet: its values are consumed as the Rust
    gateway's parser would, and the flag is noted so `parse` can refuse it by name."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _note_not_yet(namespace, option_string or self.option_strings[0])


class _StoreServedValue(argparse.Action):
    """A served flag whose choices include values smg does not serve yet (`--history-backend
    oracle`): those are noted for `parse` to refuse; the rest are stored."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        flag = option_string or self.option_strings[0]
        if values in NOT_YET_VALUES.get(self.option_strings[0], ()):
            _note_not_yet(namespace, f"{flag} {values}")
            return
        setattr(namespace, self.dest, values)


def add_section(parser: argparse._ActionsContainer, cls: type, dest_prefix: str) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        flag = _flag(f)
        names = [flag, *f.metadata.get("aliases", ())]
        dest = f"{dest_prefix}{f.name}"
        kind, _optional = _base_type(hints[f.name])
        env_names = (_env_name(flag), *f.metadata.get("env_aliases", ()))
        env = next((os.environ[n] for n in env_names if n in os.environ), None)
        default: Any = f.default
        help_text = f"{f.metadata['help']} (default: {default!r}; env {' or '.join(env_names)})"
        help_text = help_text.replace("%", "%%")  # argparse %-formats help: a literal 90% stays
        if kind is bool:
            if env is not None:
                default = _parse_bool(env)
            parser.add_argument(
                *names, dest=dest, action="store_true", default=default, help=help_text
            )
            for negation in f.metadata.get("negations", ()):
                # the Rust gateway's opposite switch (`--control-plane-audit-enabled`), same dest
                parser.add_argument(
                    negation, dest=dest, action="store_false", default=default,
                    help=f"Undoes {flag} (the Rust gateway's switch; already the default).",
                )  # fmt: skip
            continue
        if kind is tuple and f.metadata.get("nargs") == "append":
            # `--flag VALUE`, repeatable (values may hold spaces); the env var is comma-separated
            values = env.split(",") if env is not None else list(default)
            parser.add_argument(*names, dest=dest, action="append", default=values, help=help_text)
            continue
        if kind is tuple and f.metadata.get("nargs") == "append+":
            # `--flag A [B ...]`, repeatable: each occurrence is one space-joined entry
            entries = [e.split() for e in env.split(",")] if env is not None else list(default)
            parser.add_argument(
                *names, dest=dest, action="append", nargs="+", default=entries, help=help_text
            )
            continue
        if kind is tuple:
            nargs = f.metadata.get("nargs")
            if env is not None and nargs == "extend_csv":  # values may hold spaces
                default = tuple(v.strip() for v in env.split(",") if v.strip())
            elif env is not None:
                default = tuple(env.replace(",", " ").split())
            repeatable = nargs in ("extend", "extend_csv")  # `--flag A B --flag C`
            parser.add_argument(
                *names,
                dest=dest,
                nargs="*",
                default=default,
                action=_Extend if repeatable else "store",
                help=help_text,
            )
            continue
        if env is not None:
            default = kind(env)
        choices = f.metadata.get("choices")
        not_yet = NOT_YET_VALUES.get(flag, ())
        parser.add_argument(
            *names,
            dest=dest,
            type=kind,
            default=default,
            choices=(*choices, *not_yet) if choices and not_yet else choices,
            action=_StoreServedValue if not_yet else "store",
            help=help_text,
        )


def build_section(cls: type, ns: argparse.Namespace, dest_prefix: str) -> Any:
    values = {}
    for f in dataclasses.fields(cls):
        dest = f"{dest_prefix}{f.name}"
        if hasattr(ns, dest):
            v = getattr(ns, dest)
            if isinstance(v, list):  # an "append+" knob's entries are lists of words
                v = tuple(" ".join(x) if isinstance(x, list) else x for x in v)
            values[f.name] = v
    return cls(**values)


def add_gateway_flags(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(GatewayConfig):
        group = parser.add_argument_group(f.name)
        section_cls = typing.get_type_hints(GatewayConfig)[f.name]
        add_section(group, section_cls, f"{f.name}.")
    add_not_yet_flags(parser)


_NARGS = {ONE: None, ANY: "*", SOME: "+"}


def _issue_title(issue: int | None) -> str:
    return f"not supported yet (issue {issue})" if issue else "not supported yet (no issue yet)"


def _with_aliases(row: NotYet) -> str:
    return f"{row.flag} ({', '.join(row.aliases)})" if row.aliases else row.flag


def add_not_yet_flags(parser: argparse.ArgumentParser) -> None:
    """The NOT_YET table as hidden arguments, listed by issue after the served flags."""
    by_issue: dict[int | None, list[NotYet]] = {}
    for row in NOT_YET:
        by_issue.setdefault(row.issue, []).append(row)
        parser.add_argument(
            row.flag,
            *row.aliases,
            dest=NOT_YET_DEST,
            action=_NotYetFlag,
            nargs=_NARGS.get(row.takes, 0),
            type=row.type,
            choices=row.choices,
            default=None,
            help=argparse.SUPPRESS,
        )
    parser.add_argument_group(
        "the Rust gateway's flags that smg does not serve yet",
        "They parse as in the Rust gateway, then the command exits 2 with `--flag is not "
        "supported yet`. By the issue that will serve them:",
    )
    for issue in sorted(by_issue, key=lambda i: (i is None, i or 0)):
        names = ", ".join(_with_aliases(r) for r in by_issue[issue])
        parser.add_argument_group(_issue_title(issue), f"{names}.")
    values = "; ".join(f"{flag} {', '.join(vs)}" for flag, vs in NOT_YET_VALUES.items())
    parser.add_argument_group("values not supported yet", f"{values}.")


def gateway_config_from(ns: argparse.Namespace) -> GatewayConfig:
    hints = typing.get_type_hints(GatewayConfig)
    sections = {
        f.name: build_section(hints[f.name], ns, f"{f.name}.")
        for f in dataclasses.fields(GatewayConfig)
    }
    return GatewayConfig(**sections)
