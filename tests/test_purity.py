"""Pure cores never touch IO or the wall clock: they take `now` and return results."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "smg"
PURE = [
    *sorted((ROOT / "core").glob("*.py")),
    ROOT / "edge" / "h1.py",
    ROOT / "edge" / "h1_write.py",
    ROOT / "pipeline" / "backends" / "h1_client.py",
    ROOT / "pipeline" / "radix_tree.py",
    ROOT / "pipeline" / "radix_eviction.py",
    ROOT / "pipeline" / "cache_state.py",
    ROOT / "pipeline" / "sampling.py",
    ROOT / "pipeline" / "body_fields.py",
    ROOT / "pipeline" / "structured_output.py",
    ROOT / "pipeline" / "loads.py",
    ROOT / "pipeline" / "output.py",
    ROOT / "pipeline" / "responses_request.py",
    ROOT / "pipeline" / "responses_items.py",
    ROOT / "pipeline" / "responses_object.py",
    ROOT / "pipeline" / "responses_output.py",
    ROOT / "pipeline" / "responses_renderer.py",
    ROOT / "pipeline" / "responses_replay.py",
    ROOT / "pipeline" / "responses_mcp.py",
    ROOT / "pipeline" / "responses_rounds.py",
    ROOT / "pipeline" / "framed.py",
    ROOT / "pipeline" / "messages_request.py",
    ROOT / "pipeline" / "messages_output.py",
    ROOT / "pipeline" / "messages_blocks.py",
    ROOT / "pipeline" / "chat_answer.py",
    ROOT / "pipeline" / "byte_decode.py",
    ROOT / "pipeline" / "detokenize.py",
    ROOT / "pipeline" / "stop.py",
    ROOT / "pipeline" / "token_cache.py",
    ROOT / "pipeline" / "pd.py",
    ROOT / "pipeline" / "engine_ids.py",
    *sorted((ROOT / "pipeline" / "providers").glob("*.py")),
    ROOT / "pipeline" / "backends" / "grpc_contract.py",
    ROOT / "pipeline" / "backends" / "grpc_requests.py",
    ROOT / "pipeline" / "backends" / "grpc_replies.py",
    ROOT / "pipeline" / "backends" / "h2_client.py",
    ROOT / "pipeline" / "backends" / "h2_data.py",
    ROOT / "pipeline" / "backends" / "h2_frames.py",
    ROOT / "pipeline" / "backends" / "h2_flow.py",
    ROOT / "pipeline" / "backends" / "h2_headers.py",
    ROOT / "pipeline" / "backends" / "h2_send.py",
    ROOT / "pipeline" / "backends" / "hpack.py",
    *sorted((ROOT / "mesh").glob("*.py")),
    ROOT / "sim" / "engine_core.py",
    ROOT / "sim" / "prefix_cache.py",
    ROOT / "sim" / "script.py",
    ROOT / "sim" / "plan.py",
    ROOT / "sim" / "text.py",
    ROOT / "sim" / "gemini_replies.py",
    *sorted((ROOT / "pipeline" / "policies").glob("*.py")),
    # the provider translations (the registry, __init__, hands them the wall clock)
    *sorted(p for p in (ROOT / "pipeline" / "providers").glob("*.py") if p.stem != "__init__"),
    ROOT / "mcp_client" / "outputs.py",
    ROOT / "mcp_client" / "server_url.py",
    ROOT / "config" / "mcp.py",  # the MCP servers file: text in, values out
    ROOT / "config" / "env_expand.py",  # ${VAR} in config values: the environ is an argument
    ROOT / "tls.py",  # context builders: file reads only, no sockets or grpc
]
FORBIDDEN = {"asyncio", "socket", "time", "aiohttp", "grpc", "threading", "random"}


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    bad = imported & FORBIDDEN
    # `random` is allowed only as a type (an injected random.Random instance)
    if "random" in bad and "random.Random" in path.read_text():
        bad.discard("random")
    assert not bad, f"{path.name} imports {sorted(bad)}"
