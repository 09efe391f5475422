"""What the tests share: the relay harness, clients, polling, snapshots and the bad-input tables.

Test modules import from here, never from each other; `tests/conftest.py` holds only fixtures.
"""

import pytest

# The helpers here assert on behalf of the tests: have pytest explain their failures too.
pytest.register_assert_rewrite(
    "tests.support.bad_input", "tests.support.clients", "tests.support.conversations", "tests.support.embedded",
    "tests.support.processes", "tests.support.relays", "tests.support.snapshots", "tests.support.claude_code",
)
