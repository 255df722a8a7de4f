"""Suite-wide leak check: no test API key may appear in anything the worker produced.

Every key the tests hand out has the shape `test-key-<hex>` (see `chart_img_server.new_key`),
so one pattern finds them all. Scanned: each test's captured stdout/stderr and logging
(`report.sections`), every `log_capture` stream (see harness.logs), and whatever a harness
feeds to `scan_text` (documents read back from the Firestore emulator, GCS objects, the
output of served worker processes). A hit fails the run, naming the test and the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

TEST_KEY = re.compile(r"test-key-[0-9a-f]{16,}")


@dataclass
class Leaks:
    found: list[str] = field(default_factory=list)


LEAKS = Leaks()


def scan_text(text: str, source: str) -> list[str]:
    """Records and returns the leaks in `text`; the message shows only the key's first chars."""
    hits = [f"{source}: {m.group(0)[:13]}…" for m in TEST_KEY.finditer(text)]
    # pytest repeats a test's earlier sections in its later phase reports: record each hit once
    LEAKS.found.extend(hit for hit in dict.fromkeys(hits) if hit not in LEAKS.found)
    return hits


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, content in report.sections:
        scan_text(content, f"{report.nodeid} [{name}]")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LEAKS.found:
        terminalreporter.section("API key leak scan: FAILED", red=True)
        for leak in LEAKS.found:
            terminalreporter.line(leak)
    else:
        terminalreporter.line("API key leak scan: no test key in any captured output")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if LEAKS.found and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
