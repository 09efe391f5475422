"""The folders sessions work in, and opening one without following a link
(docs/sessions.md#folders, docs/tasks.md#the-folder-a-task-runs-in).

A session works in a folder under one of the owner's `allowed_roots`, or in its own folder
`<data dir>/work/<session id>` when nobody named one. Agents write in these folders (a task
can replace any folder inside its own by a link), so a path checked once means nothing the next
time: every use opens the folder from `/` one component at a time with `O_NOFOLLOW` and keeps
the descriptor, which the sandbox binds (`--bind-fd`), so a link swapped in before, during or
after the check is refused or changes nothing.

The rules, for a resolved absolute path:
- the data directory and everything in it are the relay's, except its `work/` folder;
- `work/` itself holds every session's own folder and is no session's folder;
- `work/<session id>` (and what is inside) belongs to that session alone: no other session,
  and no one naming a folder, may use it;
- anything else must lie under an allowed root; a root inside another root or inside the
  data directory (`work/` aside) is not used, as a task could replace it by a link and so move
  the root itself anywhere;
- no folder is or holds a place where the machine's services keep their unix sockets — the
  temporary folder (the embedded Redis's socket, other relays' too), `/run`, the folder of a
  unix socket in `REDIS_URL` — since a sandbox shares no network but reaches a socket it sees.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import write_transaction
from oar.core.models import Session

# Opening a folder on the way: a directory, never through a link, not kept by a child process.
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# `/` itself: the machine's root, which no agent replaces.
ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# The name of a session's own folder in `work/`: a session id (64 random bits as hex).
OWN_FOLDER_NAME = re.compile(f"[0-9a-f]{{{2 * defaults.SESSION_ID_BYTES}}}")
# A session's own folder is private to the relay's user.
OWN_FOLDER_MODE = 0o700

OUTSIDE = "is outside the owner's allowed_roots"
WORK_ROOT = "holds every session's own folder"
ANOTHERS_FOLDER = "is a session's own folder, which only that session uses"
DATA_DIR = "is in the relay's data directory"
SOCKETS = "holds {place}, where the machine's services keep their sockets (the relay's Redis among them)"
# Folders where services keep their unix sockets on most systems, besides the temporary folder.
RUNTIME_FOLDERS = ("/run", "/var/run")


class FolderRefused(Exception):
    """A folder a session may not use; `reason` completes "The folder … ". `outside`: for lack
    of an allowed root (the call's usual sentence), rather than for what the folder is."""

    def __init__(self, reason: str, *, outside: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.outside = outside


@dataclass(frozen=True)
class RelayPlaces:
    """The relay's own folders, resolved: its data directory and the `work/` folder in it; and
    the folders where sockets live (`SOCKETS`), which no session's folder may be or hold."""

    data_dir: str
    work: str
    socket_folders: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: Config) -> RelayPlaces:
        data_dir = os.path.realpath(config.data_dir)
        return cls(data_dir=data_dir, work=os.path.join(data_dir, "work"), socket_folders=socket_folders(config))

    def own_folder(self, session_id: str) -> str:
        """Where a session that was given no folder works."""
        return os.path.join(self.work, session_id)

    def here(self, session_id: str, path: str) -> str:
        """`path`, or this machine's own folder of the session when `path` is that folder as
        another node of the relay named it (`<its data dir>/work/<session id>`): a session's own
        folder is kept under each node's data directory, wherever the one that made the session
        keeps its own (docs/operations.md#several-nodes)."""
        parts = os.path.normpath(path).split(os.sep)
        return self.own_folder(session_id) if parts[-2:] == ["work", session_id] else path


def socket_folders(config: Config) -> tuple[str, ...]:
    """Where unix sockets of the machine's services are, resolved: the temporary folder (the
    embedded launcher makes its Redis's folder there, as every relay on the machine does), the
    runtime folders, and the folder of the Redis socket the relay was given, if it is one."""
    folders = [tempfile.gettempdir(), *RUNTIME_FOLDERS]
    redis_url = config.redis_url or ""
    if redis_url.startswith("unix://"):
        folders.append(os.path.dirname(redis_url.removeprefix("unix://").split("?", 1)[0]))
    resolved = (os.path.realpath(folder) for folder in folders if os.path.isabs(folder))
    return tuple(dict.fromkeys(folder for folder in resolved if folder != "/"))


def within(path: str, root: str) -> bool:
    """`path` is `root` or lies under it (both absolute and normalised)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def usable_roots(roots: Sequence[str], places: RelayPlaces | None) -> list[str]:
    """The allowed roots, resolved, less those a task could move: a root inside another root,
    or inside the data directory other than `work/` itself (both lie in folders agents write)."""
    named = [(os.path.normpath(root), os.path.realpath(root)) for root in roots if os.path.isabs(root)]
    usable = []
    for index, (written, real) in enumerate(named):
        others = [form for other, pair in enumerate(named) if other != index for form in pair]
        if any(form != path and within(path, form) for path in (written, real) for form in others):
            continue
        if places is not None and real != places.work and any(within(path, places.data_dir) for path in (written, real)):
            continue
        usable.append(real)
    return usable


def refusal(folder: str, roots: Sequence[str], places: RelayPlaces | None, *, session_id: str | None = None) -> FolderRefused | None:
    """Why `folder` (resolved, absolute) may not be the folder of session `session_id` (None:
    a folder someone names, which is never a session's own); None when it may. Without `places`
    only the allowed roots are checked."""
    if places is not None and session_id is not None and within(folder, places.own_folder(session_id)):
        return None
    if not any(within(folder, root) for root in usable_roots(roots, places)):
        return FolderRefused(OUTSIDE, outside=True)
    if places is not None:
        held = next((place for place in places.socket_folders if within(place, folder)), None)
        if held is not None:
            return FolderRefused(SOCKETS.format(place=held))
    if places is None or not within(folder, places.data_dir):
        return None
    if folder == places.work:
        return FolderRefused(WORK_ROOT)
    if not within(folder, places.work):
        return FolderRefused(DATA_DIR)
    first = os.path.relpath(folder, places.work).split(os.sep)[0]
    return FolderRefused(ANOTHERS_FOLDER) if OWN_FOLDER_NAME.fullmatch(first) else None


def open_folder(path: str) -> int:
    """A descriptor of the folder at `path` (absolute, normalised), reached from `/` one
    component at a time without following a link; raises FolderRefused. The caller closes it."""
    if not os.path.isabs(path) or os.path.normpath(path) != path or path.startswith("//"):
        raise FolderRefused("is not an absolute, normalised path")
    return open_below(os.open("/", ROOT_FLAGS), "/", path)


def open_below(start: int, start_path: str, path: str) -> int:
    """`path`, a folder under `start_path` (whose descriptor `start` this takes over), opened
    one component at a time without following a link; raises FolderRefused."""
    folder, reached = start, start_path
    try:
        for part in os.path.relpath(path, start_path).split(os.sep) if path != start_path else ():
            reached = os.path.join(reached, part)
            inner = _open_component(folder, part, reached)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def _open_component(folder: int, name: str, reached: str) -> int:
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        raise FolderRefused("does not exist on this relay") from None
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise FolderRefused(f"cannot be opened ({error.strerror})") from None
    # ELOOP or ENOTDIR: a link (which of the two depends on the flags), or something not a folder.
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link:
        raise FolderRefused(f"has a link on its way ({reached}), which the relay does not follow")
    raise FolderRefused(f"has a file where a folder should be ({reached})")


def ensure_own_folder(places: RelayPlaces, session_id: str) -> None:
    """Make the session's own folder (private to the relay's user) when it is not there yet."""
    os.makedirs(places.work, exist_ok=True)
    work = open_folder(places.work)
    try:
        os.mkdir(session_id, OWN_FOLDER_MODE, dir_fd=work)
    except FileExistsError:
        pass  # made before; what it is now is checked when it is opened
    finally:
        os.close(work)


def folder_of(places: RelayPlaces, session: Session) -> str:
    """The folder a session works in. A session that has none (a repository-based provider's), or
    that still has the `work/` folder every session shared before each had its own, works in
    its own; such a session is moved there (its agent session starts anew, as when update_session
    gives it a new folder), so that its turns and its tasks see the same folder."""
    own = places.own_folder(session.id)
    if session.cwd is not None and os.path.normpath(session.cwd) != places.work:
        return session.cwd
    if session.cwd is not None:
        with write_transaction():
            Session.update(cwd=own, agent_session_id=None).where(
                (Session.id == session.id) & (Session.cwd == session.cwd)
            ).execute()
        session.cwd, session.agent_session_id = own, None
    return own


@contextmanager
def opened(config: Config, session: Session, roots: Sequence[str], folder: str | None = None) -> Iterator[tuple[str, int]]:
    """The session's folder (`folder`, else its current one) checked against the rules and
    opened without following a link: `(path, descriptor)`, the descriptor closed afterwards.
    The session's own folder is made on first use. Raises FolderRefused."""
    places = RelayPlaces.of(config)
    path = places.here(session.id, folder if folder is not None else folder_of(places, session))
    if path == places.own_folder(session.id):
        ensure_own_folder(places, session.id)
    refused = refusal(os.path.normpath(path), roots, places, session_id=session.id)
    if refused is not None:
        raise refused
    descriptor = open_folder(path)
    try:
        yield path, descriptor
    finally:
        os.close(descriptor)
