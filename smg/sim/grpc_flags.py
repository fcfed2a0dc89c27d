"""`smg sim --grpc`'s flags, added to the `smg sim` parser.

Kept apart from the engine (smg/sim/grpc_cli.py and what it imports) so that building the
command line, which every `smg` command does, does not import the simulated engine.
"""

from __future__ import annotations

import argparse

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
