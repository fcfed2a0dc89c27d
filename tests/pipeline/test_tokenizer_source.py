"""Tokenizer names resolved offline: a local folder or file, else a Hugging Face id in the local
cache (HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub);
an id the cache lacks is an error naming the id and where it was looked for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.hf_cache import REVISION, fake_hf_cache

from smg.pipeline.tokenizer import Tokenizer
from smg.pipeline.tokenizer_source import (
    NoSuchPath,
    TokenizerNotFound,
    hf_hub_cache,
    is_hf_id,
    resolve_tokenizer_dir,
    worker_tokenizer_problem,
)
from smg.sim.tokenizer_files import qwen3_tokenizer_dir

QWEN = "Qwen/Qwen3-0.6B"


def test_an_id_in_the_cache_is_its_refs_main_snapshot_and_loads(tmp_path: Path) -> None:
    snap = fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir())
    fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir(), revision="f" * 40, ref=False)
    found = resolve_tokenizer_dir(QWEN, {"HF_HOME": str(tmp_path)})
    assert found == snap and found.name == REVISION
    tok = Tokenizer.load(found)
    try:
        assert tok.chat_template is not None
    finally:
        tok.close()


def test_without_refs_main_the_newest_snapshot_with_a_tokenizer_is_taken(tmp_path: Path) -> None:
    old = fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir(), revision="a" * 40, ref=False)
    new = fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir(), revision="b" * 40, ref=False)
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    assert resolve_tokenizer_dir(QWEN, {"HF_HOME": str(tmp_path)}) == new


def test_an_id_missing_from_the_cache_names_the_id_and_the_folder(tmp_path: Path) -> None:
    fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir())
    with pytest.raises(TokenizerNotFound) as info:
        resolve_tokenizer_dir("Org/absent-model", {"HF_HOME": str(tmp_path)})
    msg = str(info.value)
    assert "'Org/absent-model'" in msg
    assert str(tmp_path / "hub" / "models--Org--absent-model") in msg
    assert "never downloads" in msg


def test_a_cached_repo_without_tokenizer_json_is_not_found(tmp_path: Path) -> None:
    (tmp_path / "hub" / "models--Org--weights-only" / "snapshots" / REVISION).mkdir(parents=True)
    with pytest.raises(TokenizerNotFound, match="Org/weights-only"):
        resolve_tokenizer_dir("Org/weights-only", {"HF_HOME": str(tmp_path)})


def test_local_folders_and_files_win_over_the_cache(tmp_path: Path) -> None:
    qwen = qwen3_tokenizer_dir()
    assert resolve_tokenizer_dir(str(qwen), {}) == qwen
    assert resolve_tokenizer_dir(str(qwen / "tokenizer.json"), {}) == qwen
    with pytest.raises(TokenizerNotFound, match=r"has no tokenizer\.json"):
        resolve_tokenizer_dir(str(tmp_path), {})
    with pytest.raises(NoSuchPath, match="no such file or folder"):
        resolve_tokenizer_dir(str(tmp_path / "nothing" / "here" / "x"), {})


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_HUB_CACHE": "/a/hub", "HF_HOME": "/b"}, Path("/a/hub")),
        ({"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, Path("/b/hub")),
        ({"XDG_CACHE_HOME": "/c"}, Path("/c/huggingface/hub")),
        ({}, Path.home() / ".cache" / "huggingface" / "hub"),
    ],
)
def test_the_cache_folder_follows_huggingface_hub(env: dict[str, str], expected: Path) -> None:
    assert hf_hub_cache(env) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [("Qwen/Qwen3-0.6B", True), ("gpt2", True), ("a/b/c", False), ("../x", False), ("", False)],
)
def test_what_counts_as_a_hub_id(name: str, ok: bool) -> None:
    assert is_hf_id(name) is ok


def test_worker_labels_are_checked(tmp_path: Path) -> None:
    fake_hf_cache(tmp_path, QWEN, qwen3_tokenizer_dir())
    env = {"HF_HOME": str(tmp_path)}
    assert worker_tokenizer_problem({}, env) is None
    assert worker_tokenizer_problem({"tokenizer_path": QWEN}, env) is None
    assert worker_tokenizer_problem({"model_path": QWEN}, env) is None
    problem = worker_tokenizer_problem({"model_path": "Org/absent"}, env)
    assert problem is not None and "Org/absent" in problem
    # a local path that does not exist is left to the engine's tokenizer (the Rust gateway)
    assert worker_tokenizer_problem({"tokenizer_path": str(tmp_path / "no" / "dir")}, env) is None
    problem = worker_tokenizer_problem({"tokenizer_path": str(tmp_path)}, env)
    assert problem is not None and "has no tokenizer.json" in problem
    template = tmp_path / "t.jinja"
    assert worker_tokenizer_problem({"chat_template": str(template)}, env) == (
        f"chat template {str(template)!r}: no such file"
    )
    template.write_text("{{ messages }}")
    assert worker_tokenizer_problem({"chat_template": str(template)}, env) is None
