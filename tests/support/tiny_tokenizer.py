"""A second tokenizer for tests of several models: a tiny byte-level BPE (a few hundred ids,
trained here in milliseconds on a fixed corpus, so the same on every run) with Qwen3's chat
template and special tokens, in a folder a simulated engine serves with --tokenizer-dir."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CORPUS = (
    "The gateway routes each request to the workers of its model.",
    "Tell me a story about a gateway.",
    "system user assistant",
)


def tiny_tokenizer_dir(directory: Path) -> Path:
    """Write the tiny tokenizer into `directory` (created) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(SPECIAL),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.save(str(directory / "tokenizer.json"))
    qwen = json.loads((qwen3_tokenizer_dir() / "tokenizer_config.json").read_text())
    config = {"chat_template": qwen["chat_template"], "eos_token": "<|im_end|>"}
    config["pad_token"] = "<|endoftext|>"
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory
