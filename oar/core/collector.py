"""What a process made while loading (modules, classes, the app, its runtime) lives as long as the
process: `freeze_loaded_objects` moves it out of the cyclic collector's way.

A full collection walks every tracked object with every thread stopped. In a worker at the end of
50 streamed turns one walked ~67,000 such objects in 39 ms, and that pause was the streams'
slowest turn (docs/benchmarks.md#streams-the-collectors-pause-2026-12-07); in a forked child it would also
touch, and so copy, the pages it shares with its parent.
"""

from __future__ import annotations

import gc


def freeze_loaded_objects() -> None:
    """Collect what loading left as garbage, then freeze the rest (`gc.freeze`): later collections
    walk only what the process makes afterwards. In a process that has shared pages with a parent
    not frozen before the fork (gunicorn's web workers), the collection would copy them: there
    `gc.freeze()` alone (gunicorn.conf.py)."""
    gc.collect()
    gc.freeze()
