"""MCP tasks (docs/mcp.md#tasks): tool calls an MCP client lets run in the background, kept in the database."""
