"""Which folders sessions may work in: only under the owner's `allowed_roots` (docs/sessions.md#folders)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oar.core.errors import invalid


def check_folder(folder: str, allowed_roots: Sequence[str], nothing: str) -> str:
    """The folder's resolved absolute path, or INVALID_INPUT when the relay may not use it.

    `~` and `~user` are refused, not expanded: the home folder of the user the relay runs as is
    not the agent's, and expanding it would let a path that reads as relative reach it
    (docs/sessions.md#folders)."""
    if folder.startswith("~"):
        raise invalid(f'Folder "{folder[:300]}" starts with "~"; the relay does not expand it: give an absolute '
                      f'path. {nothing}'.strip())
    path = Path(folder)
    refused = invalid(f'The relay may not use folder "{folder[:300]}". {nothing}'.strip())
    if not path.is_absolute():
        raise refused
    resolved = path.resolve()
    if not any(_is_within(resolved, Path(root).resolve()) for root in allowed_roots):
        raise refused
    if not resolved.is_dir():
        raise invalid(f'Folder "{folder[:300]}" does not exist on this relay. {nothing}'.strip())
    return str(resolved)


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
