"""`smg` command line, generated from the config tree in `smg/config.py`.

`smg` alone means `smg launch`. Every knob is also read from the environment as `SMG_<FLAG>`
(for example `SMG_POLICY=round_robin`); an explicit flag wins.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Sequence
from typing import Any

from smg.config import ConfigError, GatewayConfig, SimConfig, replace_path
from smg.config.not_yet import ANY, NOT_YET, NOT_YET_VALUES, ONE, SOME, NotYet, not_yet_message
from smg.process import run_until_signal, until_stopped

COMMANDS = ("launch", "node", "sim", "dev")
# the name on PyPI (`smg` there is the Rust gateway); the import package and the command stay `smg`
DISTRIBUTION = "pysmg"


def version_line() -> str:
    """`pysmg 0.1.0`: the installed distribution's version, else the checkout's `__version__`."""
    import importlib.metadata  # ~0.1 s to import: only for --version

    try:
        return f"{DISTRIBUTION} {importlib.metadata.version(DISTRIBUTION)}"
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        from smg import __version__

        return f"{DISTRIBUTION} {__version__} (not installed)"


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


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that lines never break inside a `--flag-name` (at its hyphens)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = re.sub(r"\s+", " ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = re.sub(r"\s+", " ", text).strip()
        return textwrap.fill(
            text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


class _Version(argparse.Action):
    """`--version`: print `version_line()` and exit 0; looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="Print the distribution name and version, and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(version_line())
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """`--version` (`smg --version` means `smg launch --version`, as `smg` means `smg launch`)."""
    parser.add_argument("--version", action=_Version)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smg", description="smg: an LLM model gateway", formatter_class=_HelpFormatter
    )
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command")
    launch = sub.add_parser(
        "launch", help="Run the gateway (the default command)", formatter_class=_HelpFormatter
    )
    add_version_flag(launch)
    add_gateway_flags(launch)
    node = sub.add_parser(
        "node",
        help="Run the gateway as a mesh node: `smg node --join HOST:PORT[,HOST:PORT]`",
        formatter_class=_HelpFormatter,
    )
    add_version_flag(node)
    add_gateway_flags(node)
    sim = sub.add_parser("sim", help="Run a simulated worker (HTTP) or engine (--grpc)")
    add_section(sim, SimConfig, "sim.")
    sim.add_argument(
        "--grpc", action="store_true", help="Serve the engines' gRPC contract instead of HTTP"
    )
    from smg.sim.grpc_flags import add_grpc_sim_args

    add_grpc_sim_args(sim)
    dev = sub.add_parser("dev", help="Gateway on 127.0.0.1:30000 in front of simulated workers")
    dev.add_argument("--port", type=int, default=30000, help="Gateway port (default 30000)")
    dev.add_argument("--workers", type=int, default=2, help="Simulated workers (default 2)")
    dev.add_argument("--model", default="sim-model", help="Model name the workers serve")
    dev.add_argument("--policy", default="cache_aware", help="Routing policy")
    dev.add_argument("--log-level", default="info", choices=("debug", "info", "warn", "error"))
    dev.add_argument(
        "--http", action="store_true", help="Simulated HTTP workers instead of gRPC engines"
    )
    return parser


# the Rust gateway's other commands: known, refused by name (exit 2) rather than read as flags
NOT_YET_COMMANDS = ("serve",)


def parse(argv: Sequence[str]) -> tuple[str, argparse.Namespace]:
    args = list(argv)
    if args and args[0] in NOT_YET_COMMANDS:
        print(f"smg: error: smg {args[0]} is not supported yet", file=sys.stderr)
        raise SystemExit(2)
    if not args or args[0] not in (*COMMANDS, "-h", "--help"):
        args = ["launch", *args]
    ns = make_parser().parse_args(args)
    command = ns.command or "launch"
    not_yet = getattr(ns, NOT_YET_DEST, None)
    if not_yet:  # one line naming the flag, as argparse's own errors (exit 2)
        print(f"smg {command}: error: {not_yet_message(not_yet)}", file=sys.stderr)
        raise SystemExit(2)
    return command, ns


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ConfigError as exc:  # a config that cannot be served: one line, no traceback
        print(f"smg: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    command, ns = parse(args)
    from smg import logs

    if command in ("launch", "node"):
        cfg = gateway_config_from(ns)
        if command == "node":
            cfg = replace_path(cfg, "mesh", enable_mesh=True)
        obs = cfg.observability
        try:
            logs.configure(obs.log_level, obs.log_json, obs.log_dir)
        except OSError as exc:
            raise ConfigError(f"--log-dir {obs.log_dir}: {exc.strerror or exc}") from None
        return _serve_gateway(cfg, command, args)
    if command == "sim":
        logs.configure("info")
        if ns.grpc:
            from smg.sim.grpc_cli import run_grpc

            run_grpc(ns)
            return 0
        from smg.sim.http_worker import serve

        sim_cfg = build_section(SimConfig, ns, "sim.")
        if sim_cfg.provider is not None:
            from smg.sim.provider_cli import serve_provider

            run_until_signal(lambda stop: until_stopped(lambda: serve_provider(sim_cfg), stop))
            return 0
        run_until_signal(lambda stop: until_stopped(lambda: serve(sim_cfg), stop))
        return 0
    if command == "dev":
        logs.configure(ns.log_level)
        from smg.dev import run_dev

        run_until_signal(
            lambda stop: run_dev(
                stop,
                port=ns.port,
                workers=ns.workers,
                model=ns.model,
                policy=ns.policy,
                http=ns.http,
            )
        )
        return 0
    raise SystemExit(f"unknown command {command}")


def _serve_gateway(cfg: GatewayConfig, command: str, args: Sequence[str]) -> int:
    """One gateway process, or (`--workers N`) a parent running N of them on one port."""
    import structlog

    from smg.app.gateway import Gateway
    from smg.app.processes import ProcessGroup, serve_child
    from smg.core.processes import PARENT_ENV, SLOT_ENV, launch_args, parse_slot, plan

    slot = parse_slot(os.environ.get(SLOT_ENV))
    if slot is not None:  # one of the group, started by its parent
        parent = int(os.environ.get(PARENT_ENV) or 0)
        run_until_signal(lambda stop: serve_child(cfg, slot[0], parent, stop))
        return 0
    chosen = plan(cfg, command, os.cpu_count())
    log = structlog.get_logger("smg.processes")
    if chosen.count == 1:

        async def single(stop: asyncio.Event) -> None:
            gateway = Gateway(cfg)  # a bad config fails here with one line, before this log
            if cfg.server.workers == 0:
                log.info("processes_single", reason=chosen.reason)
            await gateway.run(stop)

        run_until_signal(single)
        return 0
    status = [0]

    async def group(stop: asyncio.Event) -> None:
        # a bad config, a refused worker name, a history backend that cannot serve: one line,
        # once, before any child starts
        await Gateway(cfg).preflight()
        log.info("processes_starting", processes=chosen.count, reason=chosen.reason)
        status[0] = await ProcessGroup(cfg, launch_args(args), chosen.count).run(stop)

    run_until_signal(group)
    return status[0]


if __name__ == "__main__":
    sys.exit(main())
