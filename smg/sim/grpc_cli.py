"""`smg sim --grpc ...`: the simulated engine's entry point.

Its flags (smg/sim/grpc_flags.py) are added to the `smg sim` parser (those the HTTP sim already
defines, such as --host, --port, --model and --seed, are shared); `run_grpc` serves until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smg.process import run_until_signal
from smg.sim import script as sc
from smg.sim.engine_actor import GrpcSimConfig
from smg.sim.grpc_engine import REALISTIC, serve
from smg.sim.grpc_flags import add_grpc_sim_args

_CORE_FLAGS = {
    "prefill_tokens_per_s": "prefill_tokens_per_s",
    "decode_ms_per_token": "decode_ms_per_token",
    "decode_ms_per_running": "decode_ms_per_running",
    "kv_capacity_tokens": "kv_capacity_tokens",
    "block_size": "block_size",
    "max_batch": "max_batch",
}


def _arg(ns: argparse.Namespace, name: str) -> Any:
    value = getattr(ns, "grpc_" + name, None)
    return value if value is not None else getattr(ns, "sim." + name, None)


_PLAIN_FLAGS = (
    "host", "port", "runtime", "model", "seed", "context_length", "chunk_tokens", "role",
    "bootstrap_port", "tls_cert_path", "tls_key_path", "tls_client_ca_path", "dp_size",
)  # fmt: skip


def config_from_args(ns: argparse.Namespace) -> GrpcSimConfig:
    base = GrpcSimConfig()
    core = REALISTIC if _arg(ns, "realistic") else base.core
    core = dataclasses.replace(
        core, **{f: v for a, f in _CORE_FLAGS.items() if (v := _arg(ns, a)) is not None}
    )
    script_path = _arg(ns, "script")
    script = sc.parse_script(Path(script_path).read_text()) if script_path else base.script
    tokenizer_dir = _arg(ns, "tokenizer_dir")
    values = {name: v for name in _PLAIN_FLAGS if (v := _arg(ns, name)) is not None}
    return dataclasses.replace(
        base,
        **values,
        core=core,
        script=script,
        corrupt_tokenizer_sha=bool(_arg(ns, "corrupt_tokenizer_sha")),
        tokenizer_dir=Path(tokenizer_dir) if tokenizer_dir else None,
        stats_port=_arg(ns, "stats_port") or 0,
        adapters=tuple(_arg(ns, "adapters") or ()),  # the HTTP sim's --adapters (SGLang only)
    )


def run_grpc(args: argparse.Namespace) -> None:
    """`smg sim --grpc ...`: serve until SIGINT/SIGTERM."""
    cfg = config_from_args(args)
    run_until_signal(lambda stop: serve(cfg, stop))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="smg-sim-grpc", description="Simulated gRPC inference engine"
    )
    add_grpc_sim_args(parser)
    run_grpc(parser.parse_args(argv))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
