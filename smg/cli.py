"""`smg` command line, generated from the config tree in `smg/config/` (`config/flags.py`).

`smg` alone means `smg launch`. Every knob is also read from the environment as `SMG_<FLAG>`
(for example `SMG_POLICY=round_robin`); an explicit flag wins.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from smg.config import ConfigError, GatewayConfig, SimConfig, replace_path
from smg.config.flags import (
    NOT_YET_DEST,
    add_gateway_flags,
    add_section,
    build_section,
    gateway_config_from,
)
from smg.config.not_yet import not_yet_message
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
    from smg.core.processes import (
        PARENT_ENV,
        SLOT_ENV,
        in_cluster,
        launch_args,
        parse_slot,
        plan,
    )

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
        cluster = in_cluster(cfg, command)  # the children join the user's cluster mesh
        procs = ProcessGroup(cfg, launch_args(args), chosen.count, cluster=cluster)
        status[0] = await procs.run(stop)

    run_until_signal(group)
    return status[0]


if __name__ == "__main__":
    sys.exit(main())
