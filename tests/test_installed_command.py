"""`pip install -e .` puts the `oar` command on the PATH (README "Agents over MCP"): the same
entry point as `python -m oar`, tried from another folder in a fresh virtual environment.

The install is offline: the environment sees this interpreter's packages (a `.pth` file naming
its site-packages folders, which works whether this interpreter is a virtual environment's, as
under `./oar-relay test`, or not; `--system-site-packages` would see the base interpreter's) and
builds with the setuptools already there (`--no-build-isolation`), so the test reaches no package
index."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from oar.actions.catalog import ordered_actions
from tests.support.processes import PROJECT


@pytest.fixture(scope="module")
def oar_command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    (Path(own_site) / "these-tests-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(PROJECT)],
        check=True, capture_output=True, timeout=300,
    )
    return venv / "bin" / "oar"


def run(command: Path, *args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OAR_")}
    return subprocess.run([str(command), *args], env={**clean, **(env or {})}, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def test_the_installed_oar_lists_the_registrys_actions(oar_command: Path, tmp_path: Path) -> None:
    done = run(oar_command, "call", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for spec in ordered_actions():
        assert spec.name in done.stdout, spec.name


def test_the_installed_oar_mcp_without_a_token_says_so_and_exits(oar_command: Path, tmp_path: Path) -> None:
    done = run(oar_command, "mcp", env={"OAR_URL": "http://127.0.0.1:9"}, cwd=tmp_path)
    assert done.returncode != 0 and "set OAR_TOKEN" in done.stderr, done.stderr
    assert done.stdout == ""

