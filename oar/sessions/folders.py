"""Which folders sessions may work in: under the owner's `allowed_roots`, never the relay's data
directory, never another session's own folder (docs/sessions.md#folders; the rules are
`oar.core.work_folders`'s, which every task and turn applies again when it starts)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oar.core.errors import invalid
from oar.core.work_folders import RelayPlaces, refusal


def check_folder(
    folder: str, allowed_roots: Sequence[str], *, places: RelayPlaces | None = None,
    session_id: str | None = None,
) -> str:
    """The folder's resolved absolute path, or INVALID_INPUT when the relay may not use it (the
    caller adds what was not done: the dispatcher the action's sentence, the owner API its own).

    Links in the path are resolved here, and the folder they lead to is checked and stored: a
    link swapped in later is never followed, as every start opens the stored path without
    following one (docs/decisions.md#a-sessions-folder-is-checked-at-every-start-issue-35). Without
    `places` (the relay's own folders) only the allowed roots are checked; `session_id`: the
    session the folder is for, which may have its own folder back.

    `~` and `~user` are refused, not expanded: the home folder of the user the relay runs as is
    not the agent's, and expanding it would let a path that reads as relative reach it
    (docs/sessions.md#folders)."""
    if folder.startswith("~"):
        raise invalid(f'Folder "{folder[:300]}" starts with "~"; the relay does not expand it: give an absolute '
                      'path.')
    path = Path(folder)
    if not path.is_absolute():
        raise invalid(f'The relay may not use folder "{folder[:300]}".')
    resolved = path.resolve()
    refused = refusal(str(resolved), allowed_roots, places, session_id=session_id)
    if refused is not None and refused.outside:
        raise invalid(f'The relay may not use folder "{folder[:300]}".')
    if refused is not None:
        raise invalid(f'The relay may not use folder "{folder[:300]}": it {refused.reason}.')
    if not resolved.is_dir():
        raise invalid(f'Folder "{folder[:300]}" does not exist on this relay.')
    return str(resolved)
