"""The sandbox a background task's command runs in (docs/tasks.md#the-sandbox).

A task runs as the relay's own user, so without a sandbox it can read what the relay can: the
worker's environment through `/proc`, the database, the data folder, other sessions' folders.
Tasks therefore run under bubblewrap (`bwrap`): the system folders read-only, the relay's
Python read-only (so `python` works), the session's folder writable, a private `/proc`, `/dev`
and `/tmp`, a minimal `/etc`, no other folder of the machine, an empty environment but a few
plain variables, no capabilities, its own process, IPC and (unless the owner allows it)
network namespaces. The data folder is covered with an empty tmpfs wherever it falls inside
something bound.

The relay finds `bwrap` on `PATH`, or at `OAR_BWRAP`; a relay without a working one runs no
task unless the owner turned on `tasks_without_sandbox`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from oar.core.config import Config

UNAVAILABLE_TEXT = (
    "Background tasks run in a sandbox on this relay, and none is available: {reason}. "
    "Install bubblewrap (bwrap) on the relay's machine, or ask the user: the owner setting "
    "tasks_without_sandbox runs tasks without one, which gives agents the owner's power. Nothing was run."
)
# System folders a task sees read-only (symlinks, as on merged-/usr systems, are recreated).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The few files of /etc that programs need to run, resolve names and check certificates; the
# rest of /etc (a service's environment file, /etc/shadow) stays out of sight.
ETC_PATHS = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd",
    "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/host.conf",
    "/etc/localtime", "/etc/timezone", "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types",
    "/etc/protocols", "/etc/services", "/etc/os-release", "/etc/debian_version", "/etc/gitconfig",
    "/etc/inputrc", "/etc/profile", "/etc/bash.bashrc", "/etc/shells", "/etc/pki",
)
# Variables of the worker's environment a task keeps (nothing that can hold a secret).
KEPT_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
PROBE_SECONDS = 15

_working: set[str] = set()  # bwrap binaries that ran the probe (per process)


def find_bwrap(config: Config) -> str | None:
    """The bwrap binary: `OAR_BWRAP` when set, else the one on PATH."""
    if config.bwrap:
        path = Path(config.bwrap)
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which("bwrap")


def unavailable(config: Config) -> str | None:
    """Why no sandbox can run here (None: one can); probes the binary once per process."""
    binary = find_bwrap(config)
    if binary is None:
        where = f"OAR_BWRAP={config.bwrap} is not an executable file" if config.bwrap else "bwrap is not on PATH"
        return where
    if binary in _working:
        return None
    argv = [binary, *_base_args(network=False), "--", "/bin/true"]
    try:
        probe = subprocess.run(argv, capture_output=True, timeout=PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{binary} could not run ({error})"
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"{binary} could not start a sandbox ({said[-1] if said else f'exit {probe.returncode}'})"
    _working.add(binary)
    return None


def unavailable_text(reason: str) -> str:
    return UNAVAILABLE_TEXT.format(reason=reason)


def wrap(config: Config, binary: str, argv: list[str], cwd: str, *, network: bool) -> list[str]:
    """bwrap's argument list that runs `argv` in `cwd` inside the sandbox (never a shell string)."""
    folder = os.path.realpath(cwd)
    mounts: list[tuple[str, list[str]]] = []
    for path in _python_prefixes():
        mounts.append((path, ["--ro-bind", path, path]))
    mounts.append((folder, ["--bind", folder, folder]))
    data_dir = os.path.realpath(config.data_dir)
    bound = [path for path, _ in mounts]
    if any(_within(data_dir, path) for path in bound):
        # The session's folder or the Python's prefix holds the data folder: cover it.
        mounts.append((data_dir, ["--tmpfs", data_dir]))
    # Outer folders first, so that a folder inside another lands on top of it; at one path a
    # cover (tmpfs) comes after the bind, so the data folder stays hidden.
    mounts.sort(key=lambda item: (len(Path(item[0]).parts), item[1][0] == "--tmpfs"))
    args = [binary, *_base_args(network=network)]
    for _, mount in mounts:
        args.extend(mount)
    args.extend(["--chdir", folder])
    for key, value in _environment(folder).items():
        args.extend(["--setenv", key, value])
    return [*args, "--", *argv]


def _base_args(*, network: bool) -> list[str]:
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args.extend(["--symlink", os.readlink(path), path])
        elif os.path.isdir(path):
            args.extend(["--ro-bind", path, path])
    for path in ETC_PATHS:
        if os.path.lexists(path):
            args.extend(["--ro-bind-try", path, path])
    args.extend([
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
        "--unshare-all", "--unshare-user", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--clearenv",
    ])
    if network:
        args.append("--share-net")
    return args


def _python_prefixes() -> list[str]:
    """The relay's Python installation(s), when they live outside the system folders."""
    prefixes = []
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), os.path.abspath(sys.prefix)}:
        if not any(_within(prefix, system) for system in SYSTEM_PATHS if os.path.isdir(system)):
            prefixes.append(prefix)
    return sorted(prefixes)


def _environment(folder: str) -> dict[str, str]:
    python_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = [python_bin, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    env = {"PATH": ":".join(dict.fromkeys(path)), "HOME": "/tmp", "TMPDIR": "/tmp", "PWD": folder}
    env.update({key: os.environ[key] for key in KEPT_ENV if os.environ.get(key)})
    env.setdefault("LANG", "C.UTF-8")
    return env


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
