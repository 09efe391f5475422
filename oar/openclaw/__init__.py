"""OpenClaw's session tools (sessions_list, sessions_history, sessions_send, sessions_spawn)
mapped onto relay_tool's actions and dispatcher (docs/openclaw.md)."""
