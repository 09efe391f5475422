"""A spinner on the terminal while `oar call` waits for the relay's answer."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
FRAME_SECONDS = 0.1


@contextlib.contextmanager
def spinning(label: str, stream: TextIO) -> Iterator[None]:
    """Spin on `stream` while the block runs, with the seconds waited; nothing at all when
    `stream` is not a terminal (a pipe or a file gets only what the command prints)."""
    if not stream.isatty():
        yield
        return
    done = threading.Event()
    started = time.monotonic()

    def spin() -> None:
        for frame in itertools.cycle(FRAMES):
            stream.write(f"\r{frame} {label} ({time.monotonic() - started:.0f} s)")
            stream.flush()
            if done.wait(FRAME_SECONDS):
                break
        stream.write("\r\x1b[K")  # the line is cleared: the answer follows on a clean terminal
        stream.flush()

    thread = threading.Thread(target=spin, name="oar-spinner", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
