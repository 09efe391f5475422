"""A task's output as the task console shows it (docs/tasks.md#read_task_output): pure functions, no database.

- `read_window` reads only the end of an output file, block by block from its end, so the
  cost of a tail does not grow with the file (a 1 GB output reads as fast as a 1 MB one);
  `window_of` does the same with any blocks, such as the pieces kept in the database;
- `render` turns that window into the console's lines: ANSI colours stripped, carriage-return
  progress redrawn, credentials masked (`masking.mask`), runs of identical lines folded into one ` [×N]`;
- `detect_counts` finds test counts (pytest, unittest, vitest, jest, mocha, go test, cargo
  test, nextest, rspec, and a plain `N passed, N failed` line); `final` only once the runner
  printed its summary;
- `stall` says how long a running task has been quiet.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

from oar.background.masking import mask
from oar.core.timeutil import iso

# A file is read backwards in blocks of this size; the database keeps output in pieces of it.
BLOCK_BYTES = 64 * 1024
# The most a tail read looks at; whatever folds or masks inside it stays correct, and test
# counts during a run are counted within it.
WINDOW_MAX_BYTES = 4 * 1024 * 1024


# Reading the end of a file ---------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The end of an output: whole lines only, and whether earlier bytes exist."""

    text: str
    at_start: bool  # the window begins at the file's first byte
    size: int  # the file's size in bytes


def read_window(source: str | os.PathLike[str] | BinaryIO, want_lines: int, max_bytes: int = WINDOW_MAX_BYTES) -> Window:
    """The last lines of a file (a path, or a file opened for reading, which is closed), read
    backwards in blocks until `want_lines` console lines (after folding) exist or `max_bytes`
    were read. Raises FileNotFoundError."""
    handle = open(source, "rb") if isinstance(source, (str, os.PathLike)) else source  # closed below
    with handle:
        return window_of(_file_blocks(handle, handle.seek(0, os.SEEK_END)), want_lines, max_bytes)


def _file_blocks(handle: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    start = size
    while start > 0:
        step = min(BLOCK_BYTES, start)
        start -= step
        handle.seek(start)
        yield start, handle.read(step)


def window_of(blocks: Iterable[tuple[int, bytes]], want_lines: int, max_bytes: int = WINDOW_MAX_BYTES) -> Window:
    """The end of an output given as `(offset, bytes)` blocks from its end backwards (a file's,
    or the pieces kept in the database, `oar.background.output_store`): blocks are taken until
    `want_lines` console lines (after folding) exist or `max_bytes` were taken, so the cost
    depends on the lines asked for, never on the output's size. Blocks that do not begin at
    offset 0 mean earlier bytes exist (or existed), and the window says so."""
    chunks: list[bytes] = []
    size: int | None = None
    begins = 0
    taken = 0
    newlines = 0
    for start, block in blocks:
        if size is None:
            size = start + len(block)
        room = max_bytes - taken
        if room <= 0:
            break
        if len(block) > room:
            start, block = start + len(block) - room, block[-room:]
        chunks.append(block)
        begins, taken = start, taken + len(block)
        newlines += block.count(b"\n")
        # Enough raw lines for the console lines asked for (+1: the first may be cut);
        # identical lines fold, so check the folded count before stopping.
        if newlines > want_lines + 1 and len(fold(_lines_of(b"".join(reversed(chunks))))) > want_lines + 1:
            break
    data = b"".join(reversed(chunks))
    at_start = begins == 0
    if not at_start:
        # The first line may begin before the window: drop it rather than show half of it.
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return Window(text=data.decode("utf-8", errors="replace"), at_start=at_start, size=size or 0)


def _lines_of(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


# From raw output to console lines --------------------------------------------------------

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def strip_ansi(text: str) -> str:
    return _CONTROL.sub("", _ANSI.sub("", text))


def redraw_line(line: str) -> str:
    """A line rewritten with carriage returns (progress bars) shows its last version."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1] if "\r" in line else line


def clean(text: str) -> list[str]:
    """Raw output → console lines (ANSI stripped, redrawn, credentials masked), unfolded."""
    text = strip_ansi(text.replace("\r\n", "\n"))
    lines = [redraw_line(line) for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return mask("\n".join(lines)).split("\n") if lines else []


def fold(lines: list[str]) -> list[str]:
    """Runs of identical consecutive lines become one line marked ` [×N]`."""
    folded: list[str] = []
    previous: str | None = None
    count = 0
    for line in lines:
        if line == previous:
            count += 1
            continue
        if previous is not None:
            folded.append(previous if count == 1 else f"{previous} [×{count}]")
        previous, count = line, 1
    if previous is not None:
        folded.append(previous if count == 1 else f"{previous} [×{count}]")
    return folded


@dataclass(frozen=True)
class Tail:
    lines: list[str]
    truncated: bool
    counts: dict[str, Any] | None


def render(window: Window, lines: int) -> Tail:
    """The last `lines` console lines of a window, and the test counts it shows."""
    cleaned = clean(window.text)
    folded = fold(cleaned)
    return Tail(
        lines=folded[-lines:] if lines else [],
        truncated=not window.at_start or len(folded) > lines,
        counts=detect_counts(cleaned),
    )


# Test counts -----------------------------------------------------------------------------


def _counts(runner: str, passed: int, failed: int, skipped: int, final: bool) -> dict[str, Any]:
    return {"runner": runner, "passed": passed, "failed": failed, "skipped": skipped, "final": final}


def _items(text: str) -> dict[str, int]:
    """`3 failed, 10 passed | 1 skipped` → {"failed": 3, "passed": 10, "skipped": 1}."""
    found: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) ([a-z]+)", text):
        found[word] = found.get(word, 0) + int(number)
    return found


_PYTEST_FINAL = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+) in [\d.]+s"
)
_PYTEST_VERBOSE = re.compile(r"::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
_PYTEST_PROGRESS = re.compile(r"^\S+\.py ([.FsExX]+)\s*(?:\[\s*\d+%\])?$")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?$")
_UNITTEST_VERBOSE = re.compile(r"\) \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)")
_VITEST_TESTS = re.compile(r"^\s*Tests\s+((?:\d+ \w+(?: \| )?)+)\s*\((\d+)\)")
_JEST_TESTS = re.compile(r"^Tests:\s+(.*\d+ total)")
_MOCHA = re.compile(r"^\s*(\d+) (passing|failing|pending)(?: \(\d+m?s\))?$")
_GO_RESULT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ")
_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+\S+\s+(?:[\d.]+s|\(cached\))")
_CARGO_RESULT = re.compile(r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored")
_CARGO_TEST = re.compile(r"^test \S.* \.\.\. (ok|FAILED|ignored)")
_NEXTEST_SUMMARY = re.compile(r"^\s*Summary \[.*?\]\s+\d+ tests? run: (.*)$")
_NEXTEST_LINE = re.compile(r"^\s*(PASS|FAIL|SKIP|SIGSEGV|SIGABRT|TIMEOUT) \[")
_RSPEC = re.compile(r"^(\d+) examples?, (\d+) failures?(?:, (\d+) pending)?")
_PLAIN = re.compile(r"\b(\d+) passed, (\d+) failed(?:, (\d+) skipped)?")
_LIVE_MARKS = {
    "vitest": (re.compile(r"^\s*[✓√] "), re.compile(r"^\s*[×✗] "), re.compile(r"^\s*↓ ")),
    "jest": (re.compile(r"^\s*✓ "), re.compile(r"^\s*✕ "), re.compile(r"^\s*○ ")),
    "mocha": (re.compile(r"^\s*✔ "), re.compile(r"^\s*\d+\) \S"), re.compile(r"^\s*- \S")),
}


def detect_counts(lines: list[str]) -> dict[str, Any] | None:
    """Test counts shown by the output's lines: the latest runner summary (`final: true`), else
    counts of the per-test lines seen so far (`final: false`); None when it is no test run."""
    final = _final_counts(lines)
    return final if final is not None else _live_counts(lines)


def _final_counts(lines: list[str]) -> dict[str, Any] | None:
    """The last summary any runner printed (the one nearest the end wins)."""
    cargo_total: list[int] | None = None
    go_packages = 0
    go_marks = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    best: dict[str, Any] | None = None
    for index, line in enumerate(lines):
        if match := _PYTEST_FINAL.match(line.strip()):
            items = _items(match[1])
            best = _counts(
                "pytest", items.get("passed", 0) + items.get("xpassed", 0),
                items.get("failed", 0) + items.get("error", 0) + items.get("errors", 0),
                items.get("skipped", 0) + items.get("xfailed", 0), True,
            )
        elif match := _UNITTEST_RAN.match(line.strip()):
            result = next((_UNITTEST_RESULT.match(later.strip()) for later in lines[index + 1 : index + 4]
                           if _UNITTEST_RESULT.match(later.strip())), None)
            if result is not None:
                details = dict(re.findall(r"(\w+)=(\d+)", result[2] or ""))
                failed = int(details.get("failures", 0)) + int(details.get("errors", 0)) + int(
                    details.get("unexpected_successes", 0))
                skipped = int(details.get("skipped", 0)) + int(details.get("expected_failures", 0))
                best = _counts("unittest", int(match[1]) - failed - skipped, failed, skipped, True)
        elif match := _VITEST_TESTS.match(line):
            items = _items(match[1])
            best = _counts("vitest", items.get("passed", 0), items.get("failed", 0),
                           items.get("skipped", 0) + items.get("todo", 0), True)
        elif match := _JEST_TESTS.match(line.strip()):
            items = _items(match[1])
            best = _counts("jest", items.get("passed", 0), items.get("failed", 0),
                           items.get("skipped", 0) + items.get("todo", 0), True)
        elif match := _MOCHA.match(line):
            if match[2] == "passing":
                best = _counts("mocha", int(match[1]), 0, 0, True)
            elif best is not None and best["runner"] == "mocha":
                best[{"failing": "failed", "pending": "skipped"}[match[2]]] = int(match[1])
        elif match := _CARGO_RESULT.match(line):
            cargo_total = [a + int(b) for a, b in zip(cargo_total or [0, 0, 0], match.groups(), strict=True)]
            passed, failed, skipped = cargo_total
            best = _counts("cargo test", passed, failed, skipped, True)
        elif match := _NEXTEST_SUMMARY.match(line):
            items = _items(match[1])
            best = _counts("nextest", items.get("passed", 0), items.get("failed", 0) + items.get("timed", 0),
                           items.get("skipped", 0), True)
        elif match := _RSPEC.match(line.strip()):
            failures, pending = int(match[2]), int(match[3] or 0)
            best = _counts("rspec", int(match[1]) - failures - pending, failures, pending, True)
        elif match := _GO_RESULT.match(line):
            go_marks[match[1]] += 1
        elif _GO_PACKAGE.match(line):
            go_packages += 1
            best = _counts("go test", go_marks["PASS"], max(go_marks["FAIL"], 1 if line.startswith("FAIL") else 0),
                           go_marks["SKIP"], True)
        elif match := _PLAIN.search(line):
            best = _counts("plain", int(match[1]), int(match[2]), int(match[3] or 0), True)
    return best


def _live_counts(lines: list[str]) -> dict[str, Any] | None:
    """Per-test lines of a run still going: the runner with the most of them."""
    tallies: dict[str, list[int]] = {}

    def add(runner: str, slot: int, amount: int = 1) -> None:
        tallies.setdefault(runner, [0, 0, 0])[slot] += amount

    for line in lines:
        if match := _PYTEST_VERBOSE.search(line):
            add("pytest", {"PASSED": 0, "XPASS": 0, "FAILED": 1, "ERROR": 1}.get(match[1], 2))
        elif match := _PYTEST_PROGRESS.match(line):
            marks = match[1]
            add("pytest", 0, marks.count(".") + marks.count("X"))
            add("pytest", 1, marks.count("F") + marks.count("E"))
            add("pytest", 2, marks.count("s") + marks.count("x"))
        elif match := _UNITTEST_VERBOSE.search(line):
            add("unittest", {"ok": 0, "FAIL": 1, "ERROR": 1, "unexpected success": 1}.get(match[1], 2))
        elif match := _CARGO_TEST.match(line):
            add("cargo test", {"ok": 0, "FAILED": 1}.get(match[1], 2))
        elif match := _NEXTEST_LINE.match(line):
            add("nextest", {"PASS": 0, "SKIP": 2}.get(match[1], 1))
        elif match := _GO_RESULT.match(line):
            add("go test", {"PASS": 0, "FAIL": 1}.get(match[1], 2))
        else:
            for runner, patterns in _LIVE_MARKS.items():
                for slot, pattern in enumerate(patterns):
                    if pattern.match(line):
                        add(runner, slot)
    if not tallies:
        return None
    runner, (passed, failed, skipped) = max(tallies.items(), key=lambda item: sum(item[1]))
    return _counts(runner, passed, failed, skipped, False)


# Stall -----------------------------------------------------------------------------------


def stall(last_output_at: datetime, now: datetime, quiet_after_minutes: int) -> dict[str, Any]:
    """`{minutesSinceOutput, since, quiet, quietAfterMinutes}` of a running task (docs/tasks.md#shown-where)."""
    minutes = max(0, int((now - last_output_at).total_seconds() // 60))
    return {
        "minutesSinceOutput": minutes,
        "since": iso(last_output_at),
        "quiet": minutes >= quiet_after_minutes,
        "quietAfterMinutes": quiet_after_minutes,
    }
