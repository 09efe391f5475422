"""The README's Codex snippet, driven by the real Codex CLI (`@openai/codex`, pinned in
tests/codex/package.json; `.ci/run` installs it with `npm ci`): `codex exec` with the snippet as
its `[mcp_servers.relay]`, its model a local fake Responses API (tests/fakes/llm.py). The model's
function call names `relay_tool`; Codex calls it on the relay's `/mcp` and the relay's JSON comes
back to the model in the next request. Without node or the CLI these tests are skipped, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM
from tests.support.clients import Agent
from tests.support.processes import PROJECT
from tests.support.relays import Relay

CODEX = PROJECT / "tests" / "codex" / "node_modules" / ".bin" / "codex"
README = PROJECT / "README.md"

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(not CODEX.exists(), reason="the Codex CLI is not installed: npm ci --prefix tests/codex"),
]


def readme_codex_snippet() -> str:
    section = README.read_text(encoding="utf-8").split("\nCodex (", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def fake_model() -> Iterator[FakeLLM]:
    fake = FakeLLM().start()
    try:
        yield fake
    finally:
        fake.stop()


def codex_exec(relay: Relay, fake: FakeLLM, token: str, prompt: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`codex exec` with a config of the fake model provider and the README's snippet, the
    relay's address in it; the token in the variable the snippet names."""
    snippet = readme_codex_snippet().replace("http://127.0.0.1:8080", relay.url)
    server = tomllib.loads(snippet)["mcp_servers"]["relay"]
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "fake-large"\nmodel_provider = "fake"\n\n'
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake.base_url}"\nwire_api = "responses"\n'
        'env_key = "FAKE_MODEL_KEY"\n\n' + snippet, encoding="utf-8",
    )
    work = home / "work"
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "LANG": "C.UTF-8",
        "FAKE_MODEL_KEY": fake.api_key, server["bearer_token_env_var"]: token,
    }
    return subprocess.run(
        [str(CODEX), "exec", "--skip-git-repo-check", prompt], cwd=work, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180,
    )


def relay_answer(output: str) -> dict[str, Any]:
    """The relay's JSON in the tool output Codex hands back to the model (after its `Output:` line)."""
    return json.loads(output.split("Output:\n", 1)[1] if "Output:\n" in output else output)


def test_codex_exec_calls_relay_tool_with_the_readmes_snippet(relay: Relay, desk: Agent, fake_model: FakeLLM,
                                                              tmp_path: Path) -> None:
    call = {"action": "create_session", "relay": "this", "title": "from codex", "text": "hello from codex",
            "wait_seconds": 30}
    done = codex_exec(relay, fake_model, desk.token, "#tool " + json.dumps(call), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]

    first, second = fake_model.bodies("/responses")
    relay_tools = [tool for tool in first["tools"] if tool.get("type") == "namespace" and tool["name"] == "mcp__relay"]
    assert [inner["name"] for inner in relay_tools[0]["tools"]] == ["relay_tool"]
    [output] = [item["output"] for item in second["input"] if item.get("type") == "function_call_output"]
    assert "requires approval" not in str(output), output
    answer = relay_answer(output if isinstance(output, str) else "".join(part["text"] for part in output))
    assert answer["ok"] is True and answer["status"] == "done", answer
    assert answer["reply"]["text"] == "echo: hello from codex"
    titles = [session["title"] for session in relay.owner.get("/api/v1/owner/sessions")["sessions"]]
    assert "from codex" in titles
    assert "tool said: " in done.stdout  # the model's last answer, shown by codex exec


def test_without_the_approval_mode_codex_exec_refuses_the_call(relay: Relay, desk: Agent, fake_model: FakeLLM,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the snippet carries `default_tools_approval_mode`: without it `codex exec` (approval
    policy "never") refuses every MCP call and the relay sees none."""
    snippet = "\n".join(line for line in readme_codex_snippet().splitlines() if "default_tools_approval_mode" not in line)
    monkeypatch.setattr(f"{__name__}.readme_codex_snippet", lambda: snippet + "\n")
    done = codex_exec(relay, fake_model, desk.token, "#tool " + json.dumps({"action": "list_relays"}), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [output] = [item["output"] for item in fake_model.bodies("/responses")[1]["input"]
                if item.get("type") == "function_call_output"]
    assert "requires approval" in str(output), output
