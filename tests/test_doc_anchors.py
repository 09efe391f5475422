"""Every `<file>.md#anchor` cited in the docs, the README and the code names a heading that exists,
by GitHub's rule for a heading's anchor (a heading renamed leaves no link pointing nowhere)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITING_SUFFIXES = {".md", ".py", ".html", ".js", ".toml", ".yml", ".yaml"}
SKIPPED_FOLDERS = {".venv", ".git", "node_modules"}
LINK = re.compile(r"([\w./-]+\.md)#([\w-]+)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text without markup, lower case, punctuation other than
    `-` and `_` dropped, each space a `-` (so a heading ending in "(`python -m x`)" ends in
    `python--m-x`)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors_of(document: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks; a repeated heading's
    second anchor ends in `-1`) and of its explicit `<a id=…>`s."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in document.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if heading := HEADING.match(line):
            anchor = github_anchor(heading.group(1))
            repeats = seen.get(anchor, 0)
            seen[anchor] = repeats + 1
            found.add(anchor if repeats == 0 else f"{anchor}-{repeats}")
        found.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return found


def cited_document(citing: Path, target: str) -> Path | None:
    """The file a citation names: relative to the citing file, to the repository, or to docs/
    (the code cites `benchmarks.md#…` as well as `docs/benchmarks.md#…`)."""
    for candidate in (citing.parent / target, ROOT / target, ROOT / "docs" / target, ROOT / "docs" / Path(target).name):
        if candidate.is_file():
            return candidate
    return None


def test_it_finds_github_anchors_of_headings_with_code_and_punctuation() -> None:
    assert github_anchor("Provider streaming (`python -m bench providers`)") == "provider-streaming-python--m-bench-providers"
    assert github_anchor("Load suite (`tests/test_load.py`)") == "load-suite-teststest_loadpy"
    assert github_anchor("list_sessions") == "list_sessions"


def test_it_finds_every_cited_anchor() -> None:
    anchors: dict[Path, set[str]] = {}
    broken = []
    for citing in sorted(ROOT.rglob("*")):
        if citing.suffix not in CITING_SUFFIXES or SKIPPED_FOLDERS & set(citing.relative_to(ROOT).parts):
            continue
        if not citing.is_file():
            continue
        text = citing.read_text(errors="replace")
        for link in LINK.finditer(text):
            where = f"{citing.relative_to(ROOT)}:{text.count(chr(10), 0, link.start()) + 1}"
            document = cited_document(citing, link.group(1))
            if document is None:
                broken.append(f"{where}: no file {link.group(0)}")
            elif link.group(2) not in anchors.setdefault(document, anchors_of(document)):
                broken.append(f"{where}: no heading for {link.group(0)}")
    assert broken == []
