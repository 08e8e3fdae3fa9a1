"""The test process's exit (tests/conftest.py ends it with pytest's status, skipping the interpreter's teardown)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
@pytest.mark.parametrize("body, status", [("assert 1 == 1", 0), ("assert 1 == 2", 1)])
def test_the_exit_status_is_pytests_own(pytester, body, status, workers):
    """Also under pytest-xdist (`make test`'s first run): each worker ends itself the same way once it has sent
    its reports, and the main process still reports every test and ends with the tests' status."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_one=f"def test_one():\n    {body}\n", test_two="def test_two():\n    assert True\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *workers)
    assert result.ret == status
    result.stdout.fnmatch_lines(["*2 passed*" if status == 0 else "*1 failed, 1 passed*"])  # the report came first
