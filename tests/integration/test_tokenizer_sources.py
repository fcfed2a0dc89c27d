"""Where each model's tokenizer comes from, end to end (IGW mode, gRPC engines).

`--tokenizer-path Qwen/Qwen3-0.6B` is found offline in a Hugging Face cache laid out under
HF_HOME (nothing downloaded); a worker registered with a model card naming its own tokenizer
folder and chat template gets those; with `--disable-tokenizer-autoload` no engine is asked
(GetTokenizer). The engines serve different tokenizers: each model's token counts show which one
was loaded.
An id the cache lacks stops the start (exit 2), or refuses the worker's registration (400),
naming the id and where it was looked for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.hf_cache import fake_hf_cache
from support.tiny_tokenizer import tiny_tokenizer_dir
from tokenizers import Tokenizer

from smg.sim.tokenizer_files import qwen3_tokenizer_dir

from .conftest import REPO, Launcher, assert_openai_error

QWEN = "Qwen/Qwen3-0.6B"
TEXT = "Quantum zebras juggle 42 marmalade jars at dawn."  # not in the tiny BPE's corpus


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hf-home"
    fake_hf_cache(home, QWEN, qwen3_tokenizer_dir())
    monkeypatch.setenv("HF_HOME", str(home))  # the processes started here inherit it
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


def count(tokenizer_json: Path, text: str) -> int:
    return len(Tokenizer.from_file(str(tokenizer_json)).encode(text, add_special_tokens=False))


def test_per_model_tokenizers_from_the_hf_cache_and_a_model_card(
    launch: Launcher, hf_home: Path
) -> None:
    gamma = launch.start_engine("gamma")  # serves Qwen3's tokenizer
    tiny_dir = tiny_tokenizer_dir(launch.tmp / "tiny-tokenizer")
    tiny = launch.start_engine("tiny", tokenizer_dir=tiny_dir)
    launch.wait_engine(gamma)
    launch.wait_engine(tiny)
    gw = launch.gateway(
        [gamma], enable_igw=True, tokenizer_path=QWEN, disable_tokenizer_autoload=True
    )
    template = launch.tmp / "tiny.jinja"
    template.write_text("{% for m in messages %}<<{{ m.content }}>>{% endfor %}")
    card = {"id": "tiny", "tokenizer_path": str(tiny_dir), "chat_template": str(template)}
    r = gw.request("POST", "/workers", {"url": tiny.url, "models": [card]})
    assert r.status == 202, r
    gw.wait_ready(2)
    r = gw.request("GET", "/readiness")  # IGW mode: each model's readiness
    assert r.status == 200, r
    assert r.json()["models"] == {
        m: {"ready": True, "healthy_workers": 1, "total_workers": 1} for m in ("gamma", "tiny")
    }

    qwen_n = count(qwen3_tokenizer_dir() / "tokenizer.json", TEXT)
    tiny_n = count(tiny_dir / "tokenizer.json", TEXT)
    assert qwen_n != tiny_n
    with gw.client() as client:
        for model, expected in (("gamma", qwen_n), ("tiny", tiny_n)):
            done = client.completions.create(model=model, prompt=TEXT, max_tokens=2)
            assert done.usage is not None and done.usage.prompt_tokens == expected, model
            chat = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert chat.choices[0].message.content
    log = gw.proc.log_path.read_text()
    assert "tokenizer_loaded" in log and str(hf_home / "hub") in log
    # the card's chat template is tiny's; gamma keeps its tokenizer's own (Qwen3's)
    chat = {"messages": [{"role": "user", "content": TEXT}], "add_generation_prompt": False}
    r = gw.request("POST", "/v1/tokenize", {"model": "tiny", **chat})
    assert r.status == 200, r
    assert r.json()["count"] == count(tiny_dir / "tokenizer.json", f"<<{TEXT}>>")
    r = gw.request("POST", "/v1/tokenize", {"model": "gamma", **chat})
    assert r.status == 200 and r.json()["count"] > qwen_n + 4, r  # <|im_start|>user ... <|im_end|>

    # a gRPC worker naming a tokenizer this host lacks is refused at registration
    other = launch.engine("other")
    body = {"url": other.url, "labels": {"tokenizer_path": "Org/absent-model"}}
    r = gw.request("POST", "/workers", body)
    assert r.status == 400, r
    assert r.json()["code"] == "BAD_REQUEST"
    msg = r.json()["error"]
    assert "'Org/absent-model'" in msg and str(hf_home / "hub") in msg
    assert gw.worker_by_url(other.url) is None


def test_an_engine_without_a_local_tokenizer_is_not_asked_when_autoload_is_off(
    launch: Launcher,
) -> None:
    """The Rust gateway's semantics: the worker is healthy, its requests find no tokenizer."""
    engine = launch.engine("gamma")
    gw = launch.gateway([engine], disable_tokenizer_autoload=True)
    assert not (launch.tmp / "tokenizer-cache").exists()  # nothing fetched from the engine
    r = gw.request("POST", "/v1/tokenize", {"model": "gamma", "prompt": "hi"})
    assert_openai_error(r, 400, "tokenizer_not_available", param="model")
    assert "tokenizer_loaded" not in gw.proc.log_path.read_text()


def test_an_id_missing_from_the_cache_stops_the_start(hf_home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "smg", "launch", "--port", "0", "--prometheus-port", "0",
         "--tokenizer-path", "Org/absent-model"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("smg: error: tokenizer 'Org/absent-model' is not a local path")
    assert str(hf_home / "hub" / "models--Org--absent-model") in last


def test_a_local_path_that_does_not_exist_is_left_to_the_engine(launch: Launcher) -> None:
    """The Rust gateway's rule: such a model gets its engine's tokenizer (GetTokenizer)."""
    engine = launch.engine("gamma")
    gw = launch.gateway([engine], tokenizer_path=str(launch.tmp / "no" / "such" / "folder"))
    r = gw.request("POST", "/v1/tokenize", {"model": "gamma", "prompt": TEXT})
    assert r.status == 200, r
    assert r.json()["count"] == count(qwen3_tokenizer_dir() / "tokenizer.json", TEXT)
    log = gw.proc.log_path.read_text()
    assert "tokenizer_path_missing_using_engine" in log
    assert str(launch.tmp / "tokenizer-cache") in log  # loaded from the GetTokenizer cache
