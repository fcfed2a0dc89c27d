"""The tokenizers' section (gRPC mode: the gateway templates and tokenizes) and the reasoning and
tool-call parser formats smg implements."""

from __future__ import annotations

from dataclasses import dataclass

from smg.config.knobs import knob

# The parser formats smg implements (smg.pipeline.parsers; a test keeps the two in step). The
# Rust gateway's other names parse and are refused as not supported yet (config/not_yet.py).
REASONING_PARSER_NAMES = (
    "cohere_cmd", "deepseek_r1", "glm45", "kimi", "minimax", "nano_v3", "passthrough", "qwen3",
    "qwen3_thinking", "step3",
)  # fmt: skip
TOOL_CALL_PARSER_NAMES = (
    "cohere", "deepseek", "deepseek31", "glm45_moe", "glm47_moe", "json", "kimik2", "llama",
    "minimax_m2", "mistral", "passthrough", "pythonic", "qwen", "qwen_coder", "qwen_xml", "step3",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TokenizerConfig:
    """gRPC mode: the gateway templates and tokenizes; engines see only token ids."""

    model_path: str | None = knob(
        None,
        "Local model folder holding tokenizer.json (+ tokenizer_config.json with the chat "
        "template). Unset: each gRPC engine's tokenizer is fetched with GetTokenizer.",
        aliases=("--model",),
    )
    tokenizer_path: str | None = knob(
        None,
        "Tokenizer folder, or a Hugging Face id (org/name) found in the local Hugging Face cache "
        "(HF_HOME; never downloaded); overrides --model-path. A worker's `tokenizer_path` label "
        "overrides both for its model.",
    )
    chat_template: str | None = knob(
        None,
        "Chat template file overriding the tokenizer's (a worker's `chat_template` overrides it).",
    )
    disable_tokenizer_autoload: bool = knob(
        False,
        "Never fetch a gRPC engine's tokenizer (GetTokenizer): only --tokenizer-path / "
        "--model-path and workers' own `tokenizer_path` are loaded.",
    )
    tokenizer_cache_dir: str | None = knob(
        None, "Where engine tokenizers are cached on disk (default ~/.cache/smg/tokenizers)."
    )
    tokenizer_cache_enable_l0: bool = knob(False, "Exact-match token cache (repeated prompts).")
    tokenizer_cache_l0_max_entries: int = knob(10_000, "Most entries in the L0 cache.")
    tokenizer_cache_l0_max_memory: int = knob(268_435_456, "Bytes the L0 cache may hold.")
    tokenizer_cache_enable_l1: bool = knob(
        False, "Prefix token cache at special-token boundaries (multi-turn chats)."
    )
    tokenizer_cache_l1_max_memory: int = knob(52_428_800, "Bytes the L1 cache may hold.")
    reasoning_parser: str | None = knob(
        None,
        "Reasoning format (deepseek_r1, qwen3, kimi, ...); default: detected from the model.",
        choices=REASONING_PARSER_NAMES,
    )
    tool_call_parser: str | None = knob(
        None,
        "Tool-call format (json, qwen, llama, mistral, ...); default: detected from the model.",
        choices=TOOL_CALL_PARSER_NAMES,
    )
