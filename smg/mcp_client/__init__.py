"""The MCP client side of the tool loop (`--mcp-config-path`): `outputs` (pure: an MCP tool result
or failure becomes the text the model sees, bounded) and `pool` (the asyncio shell: one lazily
opened session per configured server, a cached tool list per server, tool calls with deadlines).
The official `mcp` SDK speaks the protocol; nothing here is a hand-written MCP client."""
