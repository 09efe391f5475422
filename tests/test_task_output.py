"""The task console's view of an output (docs/tasks.md#read_task_output), as pure functions: tail reading, ANSI,
folding, credential masking, test counts from real runner transcripts, stall."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from oar.background.output_files import OutputRefused, open_inside
from oar.background.task_output import Window, clean, detect_counts, fold, mask, read_window, render, stall

FIXTURES = Path(__file__).parent / "fixtures" / "task_output"

# One per runner: (fixture, runner, passed, failed, skipped). Each suite ran 4 tests: 2 pass,
# 1 fails on purpose, 1 is skipped (tests/fixtures/task_output/README.md).
RUNNERS = [
    ("pytest.txt", "pytest"),
    ("pytest_verbose.txt", "pytest"),
    ("unittest.txt", "unittest"),
    ("vitest.txt", "vitest"),
    ("jest.txt", "jest"),
    ("mocha.txt", "mocha"),
    ("cargo_test.txt", "cargo test"),
    ("go_test.txt", "go test"),
    ("nextest.txt", "nextest"),
    ("rspec.txt", "rspec"),
]
# Where each transcript's summary starts: cut there, the run is still going.
SUMMARY_START = re.compile(
    r"short test summary|^Ran \d|^test result|Test Files|^Tests:|\d+ passing|^-{20,}|^FAIL\s|Summary \[|^Finished in"
)


@pytest.mark.parametrize(("name", "runner"), RUNNERS)
def test_it_counts_a_finished_run_from_the_runners_real_output(name: str, runner: str) -> None:
    lines = clean((FIXTURES / name).read_text())
    assert detect_counts(lines) == {"runner": runner, "passed": 2, "failed": 1, "skipped": 1, "final": True}


@pytest.mark.parametrize(
    ("name", "runner"),
    [pair for pair in RUNNERS if pair[0] in ("pytest_verbose.txt", "unittest.txt", "vitest.txt", "jest.txt",
                                             "mocha.txt", "cargo_test.txt", "go_test.txt", "nextest.txt")],
)
def test_a_run_without_its_summary_yet_is_not_final(name: str, runner: str) -> None:
    lines = clean((FIXTURES / name).read_text())
    cut = next(index for index, line in enumerate(lines) if SUMMARY_START.search(line))
    counts = detect_counts(lines[:cut])
    assert counts is not None and counts["final"] is False and counts["runner"] == runner
    assert counts["passed"] + counts["failed"] >= 1


def test_the_plain_passed_failed_line_counts() -> None:
    lines = clean((FIXTURES / "plain.txt").read_text())
    assert detect_counts(lines) == {"runner": "plain", "passed": 12, "failed": 2, "skipped": 0, "final": True}
    assert detect_counts(["compiling", "linking"]) is None


def test_colours_are_stripped_and_progress_redraws_show_their_last_state() -> None:
    raw = "\x1b[1m\x1b[31mred bold\x1b[0m\n\x1b]8;;http://x\x07link\x1b]8;;\x07\n10%\r50%\r100%\nend\r\n"
    assert clean(raw) == ["red bold", "link", "100%", "end"]
    assert not any("\x1b" in line for line in clean((FIXTURES / "vitest.txt").read_text()))


def test_identical_consecutive_lines_fold_into_one() -> None:
    assert fold(["a", "a", "a", "b", "a", "c", "c"]) == ["a [×3]", "b", "a", "c [×2]"]
    assert fold([]) == []


SECRETS = [
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "hunter2-very-secret",
    "s3cr3t-db-pass",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB",
]
LEAKY_OUTPUT = f"""\
export OPENAI_API_KEY={SECRETS[0]}
calling with {SECRETS[1]}
git clone https://{SECRETS[2]}@github.com/o/r
slack {SECRETS[3]}
aws {SECRETS[4]}
curl -H "Authorization: Bearer {SECRETS[5]}" https://api
password={SECRETS[6]}
connecting to postgresql://app:{SECRETS[7]}@db:5432/app
-----BEGIN PRIVATE KEY-----
{SECRETS[8]}
-----END PRIVATE KEY-----
-----BEGIN OPENSSH PRIVATE KEY-----
{SECRETS[9]}
-----END OPENSSH PRIVATE KEY-----
done
"""


def test_every_kind_of_credential_is_masked() -> None:
    shown = "\n".join(clean(LEAKY_OUTPUT))
    for secret in SECRETS:
        assert secret not in shown, secret
    assert "postgresql://app:****@db:5432/app" in shown
    assert "password=****" in shown and "done" in shown


@pytest.mark.parametrize("lines", [1, 2, 3, 5, 8, 13, 50])
def test_no_credential_leaks_whatever_the_tail_window_cuts(tmp_path: Path, lines: int) -> None:
    """Windows that start inside a private key block, or a `lines` limit that cuts one."""
    path = tmp_path / "out.log"
    path.write_text(LEAKY_OUTPUT)
    size = path.stat().st_size
    for max_bytes in range(16, size + 16, 7):
        window = read_window(path, lines, max_bytes=max_bytes)
        shown = "\n".join(render(window, lines).lines)
        for secret in SECRETS:
            assert secret not in shown, (max_bytes, lines, secret)
            # Not even a part of it long enough to matter.
            assert secret[-12:] not in shown, (max_bytes, lines, secret)


def test_a_key_block_still_being_written_is_masked_to_the_end() -> None:
    assert mask("start\n-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\nMore") == (
        "start\n-----BEGIN RSA PRIVATE KEY----- [private key masked]"
    )


def test_the_tail_keeps_the_last_lines_and_says_when_earlier_ones_exist(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_text("".join(f"line {n}\n" for n in range(1000)))
    tail = render(read_window(path, 5), 5)
    assert tail.lines == [f"line {n}" for n in range(995, 1000)] and tail.truncated is True
    everything = render(read_window(path, 1000), 1000)
    assert len(everything.lines) == 1000 and everything.truncated is False
    path.write_text("only\n")
    assert render(read_window(path, 5), 5) == render(Window("only\n", True, 5), 5)


def test_a_tail_of_a_large_file_reads_only_its_end(tmp_path: Path) -> None:
    """200 MB (sparse, so the test writes little) with lines at its end: the read takes the
    end only, measured by the bytes this process read (/proc/self/io `rchar`)."""
    path = tmp_path / "big.log"
    with open(path, "wb") as handle:
        handle.truncate(200 * 1024 * 1024)
        handle.seek(0, 2)
        handle.write(b"\n" + b"".join(b"tail %d\n" % n for n in range(100)))

    def bytes_read() -> int:
        io = Path("/proc/self/io").read_text()
        return int(re.search(r"rchar: (\d+)", io)[1])

    before = bytes_read()
    tail = render(read_window(path, 50), 50)
    spent = bytes_read() - before
    assert tail.lines[-1] == "tail 99" and tail.truncated is True
    assert spent < 1024 * 1024, spent


def test_folding_identical_lines_reads_further_back_until_enough_lines_exist(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_text("first\n" + "again\n" * 50_000 + "last\n")
    tail = render(read_window(path, 3), 3)
    assert tail.lines == ["first", "again [×50000]", "last"]


def test_stall_says_how_long_the_output_has_been_quiet() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0)
    assert stall(now - timedelta(minutes=3, seconds=59), now, 10) == {
        "minutesSinceOutput": 3, "since": "2026-11-29T11:56:01.000Z",
        "quiet": False, "quietAfterMinutes": 10,
    }
    assert stall(now - timedelta(minutes=10), now, 10)["quiet"] is True


# Opening an agent's output file (docs/tasks.md#agent-output-files) ------------------------------------------


def test_only_a_regular_file_inside_the_folder_is_opened_and_no_link_is_followed(tmp_path: Path) -> None:
    secret = tmp_path / "oar.db"
    secret.write_text("the relay's database\n")
    folder = tmp_path / "agent-tasks" / "s1"
    (folder / "claude" / "tasks").mkdir(parents=True)
    good = folder / "claude" / "tasks" / "b1.output"
    good.write_text("3 passed\n")
    with open_inside(folder, str(good)) as handle:
        assert read_window(handle, 10).text == "3 passed\n"
    (folder / "link.output").symlink_to(secret)
    (folder / "up").symlink_to(tmp_path)
    os.mkfifo(folder / "pipe.output")
    for path in (folder / "link.output", folder / "up" / "oar.db", folder / "pipe.output", folder / "claude"):
        with pytest.raises(OutputRefused):
            open_inside(folder, str(path))
    for outside in (secret, folder / ".." / ".." / "oar.db", folder):
        with pytest.raises(OutputRefused):
            open_inside(folder, str(outside))
    good.unlink()
    good.symlink_to(secret)  # swapped for a link after it was reported
    with pytest.raises(OutputRefused):
        open_inside(folder, str(good))
    with pytest.raises(FileNotFoundError):
        open_inside(folder, str(folder / "never-written.output"))
