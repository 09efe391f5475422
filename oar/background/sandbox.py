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

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from oar.core import work_folders
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


class PythonUnavailable(Exception):
    """The relay's Python installation cannot be bound (a link appeared on its way)."""


@dataclass
class Launch:
    """bwrap's argument list and the descriptors it binds: passed to it, closed once it started."""

    argv: list[str]
    fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def wrap(config: Config, binary: str, argv: list[str], folder: str, folder_fd: int, *, network: bool) -> Launch:
    """bwrap's arguments that run `argv` inside the sandbox, in `folder`, never a shell string.

    `folder_fd` is the session's folder opened without following a link
    (`work_folders.opened`): bwrap binds that descriptor (`--bind-fd`), so the folder a task
    gets is the one checked, whatever link replaces its path in between or while it runs. The
    relay's Python is bound the same way. Raises FolderRefused (the folder holds the data
    directory behind a link) or PythonUnavailable; nothing stays open then."""
    launch = Launch(argv=[])
    try:
        mounts = _mounts(config, launch, folder, folder_fd)
    except BaseException:
        launch.close()
        raise
    # Outer folders first, so that a folder inside another lands on top of it; at one path a
    # cover (tmpfs) comes after the bind, so the data folder stays hidden.
    mounts.sort(key=lambda item: (len(Path(item[0]).parts), item[1][0] == "--tmpfs"))
    args = [binary, *_base_args(network=network)]
    for _, mount in mounts:
        args.extend(mount)
    args.extend(["--chdir", folder])
    for key, value in _environment(folder).items():
        args.extend(["--setenv", key, value])
    launch.argv = [*args, "--", *argv]
    return launch


def _mounts(config: Config, launch: Launch, folder: str, folder_fd: int) -> list[tuple[str, list[str]]]:
    mounts: list[tuple[str, list[str]]] = []
    for path, real in _python_prefixes():
        try:
            fd = work_folders.open_folder(real)
        except work_folders.FolderRefused as refused:
            raise PythonUnavailable(f"the relay's Python installation {real} {refused.reason}") from None
        launch.fds.append(fd)
        mounts.append((path, ["--ro-bind-fd", str(fd), path]))
    mounts.append((folder, ["--bind-fd", str(folder_fd), folder]))
    data_dir = os.path.realpath(config.data_dir)
    if data_dir != folder and work_folders.within(data_dir, folder):
        # The session's folder holds the data folder (the rules never let it be the data folder):
        # each folder on the way to it is bound onto itself, which a task cannot rename or
        # replace by a link (a mount point), so that the cover stays on the data folder.
        for path, fd in _folders_on_the_way(folder, folder_fd, data_dir):
            launch.fds.append(fd)
            mounts.append((path, ["--bind-fd", str(fd), path]))
    if any(work_folders.within(data_dir, path) for path, _ in mounts):
        # The session's folder or the Python's prefix holds the data folder: cover it.
        mounts.append((data_dir, ["--tmpfs", data_dir]))
    return mounts


def _folders_on_the_way(folder: str, folder_fd: int, data_dir: str) -> list[tuple[str, int]]:
    """The folders between `folder` and the data folder, each opened from the one above without
    following a link; the data folder itself is checked to be no link either."""
    opened: list[tuple[str, int]] = []
    parent, parent_fd = folder, folder_fd
    try:
        for part in os.path.relpath(data_dir, folder).split(os.sep):
            path = os.path.join(parent, part)
            fd = work_folders.open_below(os.dup(parent_fd), parent, path)
            if path == data_dir:
                os.close(fd)
                break
            opened.append((path, fd))
            parent, parent_fd = path, fd
    except BaseException:
        for _, fd in opened:
            os.close(fd)
        raise
    return opened


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


@functools.cache
def _python_prefixes() -> list[tuple[str, str]]:
    """The relay's Python installation(s) when they live outside the system folders, each as
    (where the sandbox shows it, the folder it is). Resolved once per process: a link that
    appears later on the way is refused, never followed."""
    prefixes = {}
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), os.path.abspath(sys.prefix)}:
        if not any(work_folders.within(prefix, system) for system in SYSTEM_PATHS if os.path.isdir(system)):
            prefixes[prefix] = os.path.realpath(prefix)
    return sorted(prefixes.items())


def _environment(folder: str) -> dict[str, str]:
    python_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = [python_bin, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    env = {"PATH": ":".join(dict.fromkeys(path)), "HOME": "/tmp", "TMPDIR": "/tmp", "PWD": folder}
    env.update({key: os.environ[key] for key in KEPT_ENV if os.environ.get(key)})
    env.setdefault("LANG", "C.UTF-8")
    return env
