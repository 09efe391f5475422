"""Files in folders an agent may write to, opened without ever following a link
(docs/team-runs.md#memory-as-files).

An agent that can write in a folder can plant a symbolic link (or a hard link) where the relay
will open a name, and the relay would then write or read whatever file the link names. Here
every path is walked one component at a time, each opened relative to its parent's descriptor
with `O_NOFOLLOW` (`openat` semantics): a link anywhere on the way, or something other than a
folder or a regular file where one is expected, raises `UnsafeFile` and nothing is read or
written through it. A file is written as a new `.partial` beside it (`O_CREAT | O_EXCL`, never
an existing name) and renamed over the name within the same folder descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePath

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The folders on the way are only walked through: O_PATH (Linux) needs no read permission on them,
# as a path lookup needs none (a home folder may be searchable and not readable).
WALK_FLAGS = (os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC) if hasattr(os, "O_PATH") else DIR_FLAGS
# O_NONBLOCK: opening a FIFO planted under the name must not wait for a writer.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FOLDER_MODE = 0o777  # narrowed by the process's umask, as mkdir does
NEW_FILE_MODE = 0o666


class UnsafeFile(OSError):
    """A link, or something other than a folder or a regular file, where the relay was to open
    one: refused, nothing read or written through it. `strerror` is a sentence naming it."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(errno.ELOOP, f"{name} {what}: the relay reads and writes only regular files, never through a link")
        self.name = name
        self.what = what

    def under(self, folder: str) -> UnsafeFile:
        """The same refusal, its name shown within `folder` (a relative name only)."""
        return self if self.name.startswith("/") else UnsafeFile(f"{folder}/{self.name}", self.what)


class TooLarge(OSError):
    """A regular file larger than the caller reads."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{name} is larger than {limit:,} bytes")


def partial_name(name: str) -> str:
    return f".{name}.partial"


def checked_name(name: str) -> str:
    """One component of a path: never empty, `.`, `..`, or holding a `/` (or a NUL)."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single file name: {name!r}")
    return name


def components(path: str | PurePath) -> tuple[bool, list[str]]:
    """Whether `path` is absolute, and its names in order."""
    pure = PurePath(path)
    names = [part for part in pure.parts if part != pure.anchor]
    return pure.is_absolute(), [checked_name(name) for name in names]


def describe(name: str, parent: int, shown: str) -> UnsafeFile:
    """Why the folder `name` in `parent` (`shown` in the error) could not be opened without following it."""
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return UnsafeFile(shown, "could not be opened without following a link")
    if stat.S_ISLNK(found.st_mode):
        return UnsafeFile(shown, "is a symbolic link")
    return UnsafeFile(shown, "is not a folder")


def open_dir_nofollow(path: str | PurePath, *, under: int | None = None, create: bool = False) -> int:
    """A descriptor of the folder `path` (absolute: from `/`; relative: from the folder `under`),
    every component opened with `O_DIRECTORY | O_NOFOLLOW` relative to the one before. `create`
    makes missing folders. The caller closes it (`opened_dir` does). Raises `UnsafeFile` for a
    link or a non-folder on the way, `FileNotFoundError` for a missing one (without `create`)."""
    absolute, names = components(path)
    if absolute:
        current = os.open("/", WALK_FLAGS if names else DIR_FLAGS)
    elif under is not None:
        current = os.dup(under)
    else:
        raise ValueError("a relative path needs the folder it is under")
    walked: list[str] = []
    try:
        for index, name in enumerate(names):
            walked.append(name)
            shown = ("/" if absolute else "") + "/".join(walked)
            flags = DIR_FLAGS if index == len(names) - 1 else WALK_FLAGS
            following = open_child_dir(current, name, shown, flags, create)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current


def open_child_dir(parent: int, name: str, shown: str, flags: int, create: bool) -> int:
    """The folder `name` in `parent`, not followed; `shown` is how an error names it."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise describe(name, parent, shown) from None
        raise
    try:
        os.mkdir(name, NEW_FOLDER_MODE, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile (by anyone): opened below without following, like any other
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise describe(name, parent, shown) from None
        raise


@contextmanager
def opened_dir(path: str | PurePath, *, under: int | None = None, create: bool = False) -> Iterator[int]:
    """`open_dir_nofollow` as a context: the descriptor is closed on the way out."""
    descriptor = open_dir_nofollow(path, under=under, create=create)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def entry_kind(folder: int, name: str) -> int | None:
    """The file type bits of `name` in `folder` itself (a link is not followed), or None when absent."""
    try:
        return stat.S_IFMT(os.stat(checked_name(name), dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def refuse_unsafe_target(folder: int, name: str) -> None:
    """Raise `UnsafeFile` when `write_file_atomic(folder, name, …)` would meet a link or a
    non-regular file under `name` or its `.partial` (so that a caller can check every file before
    it writes the first)."""
    for each in (name, partial_name(name)):
        kind = entry_kind(folder, each)
        if kind == stat.S_IFLNK:
            raise UnsafeFile(each, "is a symbolic link")
        if kind is not None and kind != stat.S_IFREG:
            raise UnsafeFile(each, "is not a regular file")


def write_file_atomic(folder: int, name: str, data: bytes) -> None:
    """Replace `name` in `folder` whole: the bytes go to a new `.<name>.partial` created with
    `O_CREAT | O_EXCL | O_NOFOLLOW` (a leftover regular one is removed first; a link there is
    refused), which is then renamed over `name` within `folder`. A link under `name` is refused
    too, although the rename would only replace the link itself."""
    refuse_unsafe_target(folder, name)
    partial = partial_name(name)
    if entry_kind(folder, partial) is not None:
        os.unlink(partial, dir_fd=folder)  # a regular file left by a write that did not finish
    try:
        descriptor = os.open(partial, CREATE_FLAGS, NEW_FILE_MODE, dir_fd=folder)
    except FileExistsError:
        # Planted between the check and the create: O_EXCL refused to open it.
        raise UnsafeFile(partial, "appeared while the relay was writing") from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view):]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.rename(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(partial, dir_fd=folder)
        except OSError:
            pass
        raise


def read_regular_file(folder: int, name: str, max_bytes: int) -> bytes:
    """The bytes of `name` in `folder`, opened with `O_NOFOLLOW`: refused (`UnsafeFile`) when it
    is a symbolic link, not a regular file, or has other names (a hard link reads another file
    as surely as a symbolic one); `TooLarge` past `max_bytes`; `FileNotFoundError` when absent."""
    try:
        descriptor = os.open(checked_name(name), READ_FLAGS, dir_fd=folder)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeFile(name, "is a symbolic link") from None
        raise
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise UnsafeFile(name, "is not a regular file")
        if found.st_nlink > 1:
            raise UnsafeFile(name, "has other names (a hard link)")
        if found.st_size > max_bytes:
            raise TooLarge(name, max_bytes)
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(descriptor, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:
        raise TooLarge(name, max_bytes)
    return data


def names_in(folder: int) -> list[str]:
    """The names in `folder`, sorted (links and all: the caller opens each without following)."""
    return sorted(os.listdir(folder))
