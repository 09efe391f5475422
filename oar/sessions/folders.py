"""Which folders sessions may work in: only under the owner's `allowed_roots` (docs/sessions.md#folders)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oar.core.errors import invalid


def check_folder(folder: str, allowed_roots: Sequence[str], nothing: str) -> str:
    """The folder's resolved absolute path, or INVALID_INPUT when the relay may not use it."""
    path = Path(folder).expanduser()
    refused = invalid(f'The relay may not use folder "{folder[:300]}". {nothing}'.strip())
    if not path.is_absolute():
        raise refused
    resolved = path.resolve()
    if not any(_is_within(resolved, Path(root).expanduser().resolve()) for root in allowed_roots):
        raise refused
    if not resolved.is_dir():
        raise invalid(f'Folder "{folder[:300]}" does not exist on this relay. {nothing}'.strip())
    return str(resolved)


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
