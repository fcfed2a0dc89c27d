"""`smg sim --grpc ...`: the simulated engine's flags and entry point.

The flags are added to the `smg sim` parser (those the HTTP sim already defines, such as --host,
--port, --model and --seed, are shared); `run_grpc` serves until SIGINT/SIGTERM.
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

_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("host", str, "Address to bind (default 127.0.0.1)"),
    ("port", int, "Port to bind; 0 picks a free one (default 50051)"),
    ("runtime", str, "Which engine's gRPC service to serve: vllm or sglang (default vllm)"),
    ("model", str, "Model name the engine reports (default sim-model)"),
    ("seed", int, "Engine seed of the default output (default 0)"),
    ("script", str, 'JSON file: [{"when": "prompt substring", "reply": "exact text"}, ...]'),
    ("prefill-tokens-per-s", float, "Prefill speed; 0 = instant (default 0; realistic 2000)"),
    ("decode-ms-per-token", float, "Base inter-token latency (default 0; realistic 20)"),
    ("decode-ms-per-running", float, "Added latency per running request (default 0; 0.1)"),
    ("kv-capacity-tokens", int, "KV cache size in tokens (default 4000000; realistic 200000)"),
    ("block-size", int, "Prefix-cache block size in tokens (default 16)"),
    ("max-batch", int, "Most requests running at once (default 1024; realistic 128)"),
    ("context-length", int, "Model context length in tokens (default 32768)"),
    ("chunk-tokens", int, "Most tokens per streamed chunk (default 8)"),
    ("tokenizer-dir", str, "Tokenizer folder (default: the bundled Qwen3 files)"),
    ("stats-port", int, "Serve GET /sim/stats on this HTTP port (default 0: off)"),
    ("role", str, "PD role: prefill, decode or regular (default regular)"),
    ("bootstrap-port", int, "SGLang PD: KV bootstrap port reported in GetServerInfo (default 0)"),
    ("tls-cert-path", str, "Serve gRPC over TLS (grpcs://) with this certificate (PEM)"),
    ("tls-key-path", str, "Private key (PEM) of --tls-cert-path"),
    ("tls-client-ca-path", str, "Require client certificates signed by this CA (mutual TLS)"),
    ("dp-size", int, "Data-parallel ranks the engine reports and accepts (default 1)"),
)
_CORE_FLAGS = {
    "prefill_tokens_per_s": "prefill_tokens_per_s",
    "decode_ms_per_token": "decode_ms_per_token",
    "decode_ms_per_running": "decode_ms_per_running",
    "kv_capacity_tokens": "kv_capacity_tokens",
    "block_size": "block_size",
    "max_batch": "max_batch",
}


def add_grpc_sim_args(parser: argparse.ArgumentParser) -> None:
    """Add the gRPC engine's flags (dest `grpc_<name>`). A flag the parser already has (the
    HTTP sim's --host/--port/--model/--seed) is left alone and read from there."""
    existing = parser._option_string_actions
    for name, kind, help_text in _FLAGS:
        flag = "--" + name
        if flag in existing:
            continue
        choices = {"runtime": ("vllm", "sglang"), "role": ("prefill", "decode", "regular")}.get(
            name
        )
        dest = "grpc_" + name.replace("-", "_")
        parser.add_argument(
            flag, dest=dest, type=kind, default=None, choices=choices, help=help_text
        )
    for flag, help_text in (
        ("--realistic", "Preset: 2000 prefill tokens/s, 20 ms/token + 0.1 ms per running request, "
         "200k KV tokens, 128 running; explicit flags override it"),
        ("--corrupt-tokenizer-sha", "Test knob: GetTokenizer sends a wrong sha256"),
    ):  # fmt: skip
        if flag not in existing:
            parser.add_argument(flag, dest="grpc_" + flag[2:].replace("-", "_"),
                                action="store_true", help=help_text)  # fmt: skip


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
