"""Details a newcomer trips on in the first hour (issue 41): what the browser asks for, what the
docs say of the code's defaults, what a checkout leaves behind."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from oar.core import jobs
from oar.core.config import Config
from oar.core.settings import default_settings
from tests.support.processes import PROJECT
from tests.support.relays import Relay


def test_the_favicon_is_served_without_signing_in(relay: Relay) -> None:
    response = requests.get(f"{relay.url}/favicon.ico", timeout=30)
    assert response.status_code == 200, response.text[:200]
    assert response.headers["Content-Type"] in ("image/vnd.microsoft.icon", "image/x-icon")
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header: reserved 0, type 1 (icon)
    assert "max-age=86400" in response.headers.get("Cache-Control", "")


def test_the_architecture_names_each_worker_entry_point_once() -> None:
    """docs/architecture.md's list of `workers/` entry points covers every job name of
    oar/core/jobs.py (`workers.delivery.*` covers that module), each module once."""
    text = (PROJECT / "docs" / "architecture.md").read_text(encoding="utf-8")
    paragraph = text.split("`workers/` sits outside `oar`", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`(workers\.[a-z_]+)\.([a-z_*]+)`", paragraph)
    modules = [module for module, _ in named]
    assert len(modules) == len(set(modules)), f"an entry point is listed twice: {named}"
    listed = {f"{module}.{name}" for module, name in named}
    for job in (value for key, value in vars(jobs).items() if key.isupper() and str(value).startswith("workers.")):
        module = job.rsplit(".", 1)[0]
        assert job in listed or f"{module}.*" in listed, f"{job} is not in docs/architecture.md"


def test_the_readmes_owner_settings_defaults_are_the_codes() -> None:
    """README "Configuration": each owner setting's default in parentheses is the one the relay uses."""
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme.split("\nOwner settings (", 1)[1].split("\n\n", 1)[0].split())
    stated = dict(re.findall(r"`([a-z_]+)` \(((?:[^()]|\([^()]*\))*)\)", paragraph))
    assert {"agent_sessions_enabled", "max_wait_seconds", "allowed_roots", "rate_writes_per_minute"} <= set(stated)
    data_dir = Path("/srv/relay")
    code = default_settings(Config(data_dir=data_dir))
    for name, said in stated.items():
        value, first = code[name], re.split(r"[,;:]", said)[0].strip()
        if name == "allowed_roots":
            assert value == [str(data_dir / "work")] and said == "the data dir's `work/`", said
        elif isinstance(value, bool):
            assert first == str(value).lower(), (name, said)
        else:
            assert first == str(value), (name, said, value)


def test_the_readme_names_no_internal_references() -> None:
    """Words a reader of the README cannot look up: the project's own seed and issue numbers."""
    readme = (PROJECT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\bseed \d+|\bissue \d+", readme)


def test_what_running_the_checkout_leaves_there_is_ignored_by_git() -> None:
    """`./oar-relay` makes `.venv/`; `pip install -e .` (with build isolation) leaves
    `oar_relay.egg-info/`; the relay keeps its data in `var/`: none of it shows as untracked."""
    if not (PROJECT / ".git").exists():
        pytest.skip("not a git checkout")
    left = [".venv/bin/python", "oar_relay.egg-info/PKG-INFO", "var/oar.db"]
    checked = subprocess.run(["git", "check-ignore", "--no-index", *left], cwd=PROJECT, capture_output=True, text=True)
    assert checked.stdout.split() == left, checked


def test_the_systemd_unit_runs_the_readmes_first_command_and_verifies(tmp_path: Path) -> None:
    """deploy/oar-relay.service starts `oar-relay` of its checkout; `systemd-analyze verify` finds
    nothing to say of it (an unknown or misspelt key is a warning there) once its paths are this
    checkout's."""
    unit = (PROJECT / "deploy" / "oar-relay.service").read_text(encoding="utf-8")
    assert "\nExecStart=/opt/oar-relay/oar-relay\n" in unit and "\nWorkingDirectory=/opt/oar-relay\n" in unit
    assert "OAR_DATA_DIR=/var/lib/oar-relay" in unit and "\nReadWritePaths=/var/lib/oar-relay\n" in unit
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    here = tmp_path / "oar-relay.service"
    here.write_text(unit.replace("/opt/oar-relay", str(PROJECT)), encoding="utf-8")
    checked = subprocess.run([analyze, "verify", str(here)], capture_output=True, text=True, timeout=60)
    assert (checked.returncode, checked.stderr.strip()) == (0, ""), checked.stderr
