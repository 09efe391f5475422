"""Read by a bare `gunicorn wsgi:app` (and used by `python app.py`).

Threaded workers, because agents' long waits (up to an hour) sit in a request thread: with
these settings one relay serves workers × threads concurrent waits and keeps answering
other requests meanwhile.
"""

import gc
import multiprocessing
import os

from oar.core import lifeline, metric_files
from oar.core.config import from_environment

bind = f"{os.environ.get('OAR_HOST', '127.0.0.1')}:{os.environ.get('PORT', '8080')}"
# gthread with deadlines for reading a request, so that clients sending slowly cannot hold the
# threads (docs/operations.md#slow-clients).
worker_class = "oar.web.request_deadlines.DeadlineWorker"
# One web process per core, at most 4: a process's threads share one GIL, so more processes than
# cores add memory (~30 MB each) and no throughput (docs/operations.md#a-bigger-relay).
workers = int(os.environ.get("WEB_CONCURRENCY", min(4, multiprocessing.cpu_count())))
threads = int(os.environ.get("OAR_WEB_THREADS", "64"))
# gthread workers answer the arbiter from their main loop, so long requests don't trip this.
timeout = 30
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("OAR_ACCESS_LOG") or None
# One relay may run several gunicorn instances (tests, benchmarks); none needs the control socket.
control_socket_disable = True


def on_starting(server: object) -> None:
    """In the arbiter, before the web processes start: the figures a previous web of this machine
    left go, so that its totals start again with it (docs/operations.md#watching-it)."""
    config = from_environment()
    if config.metrics_on:
        metric_files.sweep_kind(config.metrics_folder, "web")


def child_exit(server: object, worker: object) -> None:
    # A web process that ended: its open waits and memory leave the sums at once.
    config = from_environment()
    if config.metrics_on:
        metric_files.sweep_live(config.metrics_folder)


def when_ready(server: object) -> None:
    """In the arbiter: stop when the launcher of `python app.py` is gone (docs/operations.md#when-the-launcher-dies).

    The kernel's parent-death signal, asked for by the launcher, reaches the arbiter first;
    this check is for systems without it. The workers check their arbiter themselves.
    """
    launcher = lifeline.take_launcher_pid()
    if launcher is not None:
        lifeline.watch_parent(launcher)


def post_fork(server: object, worker: object) -> None:
    # A worker whose arbiter is killed gets SIGTERM at once, not at its next parent check.
    lifeline.die_with_parent()


def post_worker_init(worker: object) -> None:
    """In a web worker, once the app is loaded: what loading made (modules, classes, the app)
    lives as long as the process, so the collector stops walking it. A full collection had
    walked those ~95,000 objects each time, 34 ms with every thread stopped
    (docs/decisions.md#the-web-workers-startup-objects-out-of-the-collectors-way-issue-14)."""
    gc.freeze()
