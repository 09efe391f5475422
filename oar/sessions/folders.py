"""Which folders sessions may work in: under the owner's `allowed_roots`, never the relay's data
directory, never another session's own folder (docs/sessions.md#folders; the rules are
`oar.core.work_folders`'s, which every task and turn applies again when it starts)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oar.core.errors import invalid
from oar.core.work_folders import RelayPlaces, refusal


def check_folder(folder: str, allowed_roots: Sequence[str], nothing: str, *, places: RelayPlaces | None = None) -> str:
    """The folder's resolved absolute path, or INVALID_INPUT when the relay may not use it.

    Links in the path are resolved here, and the folder they lead to is checked and stored: a
    link swapped in later is never followed, as every start opens the stored path without
    following one (docs/decisions.md#a-sessions-folder-is-checked-at-every-start). Without
    `places` (the relay's own folders) only the allowed roots are checked.

    `~` and `~user` are refused, not expanded: the home folder of the user the relay runs as is
    not the agent's, and expanding it would let a path that reads as relative reach it
    (docs/sessions.md#folders)."""
    if folder.startswith("~"):
        raise invalid(f'Folder "{folder[:300]}" starts with "~"; the relay does not expand it: give an absolute '
                      f'path. {nothing}'.strip())
    path = Path(folder)
    if not path.is_absolute():
        raise invalid(f'The relay may not use folder "{folder[:300]}". {nothing}'.strip())
    resolved = path.resolve()
    refused = refusal(str(resolved), allowed_roots, places)
    if refused is not None and refused.outside:
        raise invalid(f'The relay may not use folder "{folder[:300]}". {nothing}'.strip())
    if refused is not None:
        raise invalid(f'The relay may not use folder "{folder[:300]}": it {refused.reason}. {nothing}'.strip())
    if not resolved.is_dir():
        raise invalid(f'Folder "{folder[:300]}" does not exist on this relay. {nothing}'.strip())
    return str(resolved)
