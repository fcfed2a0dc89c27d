"""The Rust gateway's launch flags that smg parses but does not serve yet.

`smg launch` accepts every flag of the Rust gateway's `smg launch` 1.13 (tests/cli/
rust_launch_help.txt is the yardstick): a flag smg serves is a `knob` of the config tree; a flag
it does not serve yet is a row here, so argparse consumes its values exactly as the Rust
gateway's parser would (a switch takes none, ONE takes one, ANY zero or more, SOME one or more)
and `smg launch` then exits 2 with `--flag is not supported yet`, never "unrecognized
arguments" and never silently. A row goes when its flag becomes a knob; a flag is never both
(a test checks). `NOT_YET_VALUES` does the same for values of served flags that smg lacks
(`--history-backend oracle`).
"""

from __future__ import annotations

from dataclasses import dataclass

SWITCH, ONE, ANY, SOME = "switch", "one", "any", "some"


@dataclass(frozen=True, slots=True)
class NotYet:
    flag: str
    issue: int | None  # the issue that will serve it; None: not planned yet
    takes: str  # SWITCH, ONE, ANY or SOME values per occurrence (repeats are allowed)
    aliases: tuple[str, ...] = ()
    type: type = str  # so a malformed value fails as it would in the Rust gateway
    choices: tuple[str, ...] | None = None


NOT_YET: tuple[NotYet, ...] = (
    NotYet("--job-queue-capacity", None, ONE, type=int),
    NotYet("--job-queue-concurrency", None, ONE, type=int),
    NotYet("--multimodal-tensor-transport", None, ONE, choices=("inline", "shm", "auto", "rdma")),
    NotYet("--multimodal-shm-min-bytes", None, ONE, type=int),
    NotYet("--multimodal-max-inflight-bytes", None, ONE, type=int),
    NotYet("--mm-per-request-image-limit", None, ONE, type=int),
    NotYet("--mm-processing", None, ONE, choices=("auto", "router", "worker")),
    NotYet("--mm-pixel-cache-mb", None, ONE, type=int),
    NotYet("--mm-pixel-rdma", None, SWITCH),
    NotYet("--mm-allowed-media-domains", None, ONE),
    NotYet("--mm-allow-private-media-hosts", None, SWITCH),
    NotYet("--rdma-listen-ip", None, ONE),
    NotYet("--rdma-slot-ttl-s", None, ONE, type=int),
    NotYet("--log-mm-timing", None, SWITCH),
    NotYet("--upstream-http2", None, SWITCH),
    NotYet("--upstream-pool-idle-timeout-secs", None, ONE, type=int),
    NotYet("--health-check-port", None, ONE, type=int),
    NotYet("--encode-policy", None, ONE, choices=("random", "round_robin", "consistent_hashing")),
    NotYet(
        "--power-of-two-load-metric",
        None,
        ONE,
        choices=("expected_wait", "requests", "least_requests"),
    ),
    NotYet("--balance-token-usage-threshold", None, ONE, type=float),
    NotYet("--overload-token-usage-threshold", None, ONE, type=float),
    NotYet("--worker-overload-waiting-requests", None, ONE, type=int),
    NotYet("--worker-overload-token-usage", None, ONE, type=float),
    NotYet("--worker-overload-protection", None, SWITCH),
    NotYet("--disable-worker-overload-protection", None, SWITCH),
    NotYet("--worker-overload-shed", None, SWITCH),
    NotYet("--kv-index", None, ONE),
    NotYet("--worker-stall-secs", None, ONE, type=int),
    NotYet("--worker-wedge-secs", None, ONE, type=int),
    NotYet("--worker-stale-secs", None, ONE, type=int),
    NotYet("--worker-warmup-secs", None, ONE, type=int),
    NotYet("--worker-warmup-share", None, ONE, type=float),
    NotYet("--worker-warmup-blocks", None, ONE, type=int),
    NotYet("--worker-warmup-thin-ratio", None, ONE, type=float),
    NotYet("--worker-warmup-divert-every", None, ONE, type=int),
    NotYet("--selection-policy", None, ONE),
    NotYet("--selection-accounting-ttl-ms", None, ONE, type=int),
    NotYet("--overlap-decay", None, ONE, type=float),
    NotYet("--selection-temperature", None, ONE, type=float),
    NotYet("--cache-boundaries", None, ONE),
    NotYet("--cache-index", None, ONE, choices=("tree", "hash")),
    NotYet("--cache-ttl-secs", None, ONE, type=int),
    NotYet("--max-idle-secs", None, ONE, aliases=("--sticky-key-idle-secs",), type=int),
    NotYet("--assignment-mode", None, ONE, choices=("random", "min_load", "min_group", "delegate")),
    NotYet("--pd-admission-wait-secs", None, ONE, type=int),
    NotYet("--stream-body-stall-timeout-secs", None, ONE, type=int),
    NotYet("--sse-keepalive-secs", None, ONE, type=int),
    NotYet("--routing-key-override", None, SWITCH, aliases=("--sticky-sessions",)),
    NotYet("--routing-key-headers", None, ANY),
    NotYet("--dp-minimum-tokens-scheduler", None, SWITCH),
    NotYet("--epd-disaggregation", None, SWITCH),
    NotYet("--encode", None, SOME),
    NotYet("--prefill-max-inflight-requests-per-worker", None, ONE, type=int),
    NotYet("--prefill-queue-size", None, ONE, type=int),
    NotYet("--prefill-queue-timeout-secs", None, ONE, type=int),
    NotYet("--kv-connector-annotation", 14, ONE),
    NotYet("--kv-engine-id-annotation", 14, ONE),
    NotYet("--encode-selector", 14, SOME),
    NotYet("--discovery-file", 14, ONE),
    NotYet("--jemalloc-prof-dir", None, ONE),
    NotYet("--request-id-headers", None, ANY),
    NotYet("--storage-context-headers", None, ANY),
    NotYet("--parser", None, ONE, choices=("legacy", "symphony")),
    NotYet("--zmq-engine-count", None, ONE, type=int),  # ZMQ (ipc://) engines: none in smg
    NotYet("--enable-wasm", None, SWITCH),
    NotYet("--storage-hook-wasm-path", None, ONE),
    NotYet("--schema-config", None, ONE),
    NotYet("--oracle-wallet-path", None, ONE),
    NotYet("--oracle-tns-alias", None, ONE),
    NotYet("--oracle-connect-descriptor", None, ONE),
    NotYet("--oracle-username", None, ONE),
    NotYet("--oracle-password", None, ONE),
    NotYet("--oracle-external-auth", None, SWITCH),
    NotYet("--oracle-pool-min", None, ONE, type=int),
    NotYet("--oracle-pool-max", None, ONE, type=int),
    NotYet("--oracle-pool-timeout-secs", None, ONE, type=int),
    NotYet("--enable-rl", None, SWITCH),
    NotYet("--rl-control-timeout-secs", None, ONE, type=int),
    NotYet("--rl-fanout-concurrency", None, ONE, type=int),
    NotYet("--priority-scheduler-enabled", None, SWITCH),
    NotYet("--priority-scheduler-default-max-class", None, ONE),
    NotYet("--priority-scheduler-config", None, ONE),
    NotYet("--priority-scheduler-tenant-metric-top-n", None, ONE, type=int),
    NotYet("--tenant-rate-limit-enabled", None, SWITCH),
    NotYet("--tenant-rate-limit-config", None, ONE),
    NotYet("--mesh-tls-ca-cert", None, ONE),
    NotYet("--mesh-tls-cert", None, ONE),
    NotYet("--mesh-tls-key", None, ONE),
)

# Values of served flags that the Rust gateway accepts and smg does not serve yet.
NOT_YET_VALUES: dict[str, tuple[str, ...]] = {
    "--history-backend": ("oracle",),
    "--discovery-provider": ("file",),
    "--backend": ("tokenspeed",),
    "--policy": ("passthrough",),
    "--prefill-policy": ("passthrough",),
    "--decode-policy": ("passthrough",),
    # the Rust gateway's parser formats that smg.pipeline.parsers lacks
    "--reasoning-parser": (
        "base", "deepseek_v31", "deepseek_v4", "deepseek_v4.1", "deepseek_v41", "dots3",
        "function_gemma", "gemma4", "glm", "glm4", "hf", "hy4", "hy_v4", "inkling", "iquest",
        "json", "k2_horizon", "kimi_k25", "kimi_k3", "kimi_thinking", "lfm2.5", "ling",
        "llama_nemotron", "minicpm5", "minimax_m2", "minimax_m3", "mistral_v13", "olmo3", "plain",
        "qwen2.5", "qwen3_tagged", "qwen3_tagged_direct", "seed_oss", "xlam",
    ),
    "--tool-call-parser": (
        "deepseek32", "deepseek_v4", "deepseek_v4.1", "deepseek_v41", "dots3", "function_gemma",
        "gemma4", "glm", "glm4", "hf", "hy4", "hy_v4", "inkling", "iquest", "k2_horizon",
        "kimi_k3", "lfm2.5", "ling", "llama_nemotron", "minicpm5", "minimax_m3", "mistral_v13",
        "nemotron", "olmo3", "plain", "qwen2.5", "qwen3", "qwen3_tagged", "qwen3_tagged_direct",
        "sarashina", "seed_oss", "xlam",
    ),
}  # fmt: skip


def not_yet_message(given: list[str]) -> str:
    """`--a is not supported yet`; more than one: the first, then the others (each once)."""
    first, *rest = dict.fromkeys(given)
    more = f" (nor {', '.join(rest)})" if rest else ""
    return f"{first} is not supported yet{more}"
