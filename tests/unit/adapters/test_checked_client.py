"""The CLI's Firestore (adapters/firestore/checked_client.py) against a Firestore that takes
the first read and never answers: the read carries the 5 s deadline and is not sent again,
so the command ends with its one line instead of waiting out the library's 60 s of retries.

Judged by what the client sent (the deadline on the call, the number of calls), never by
how long it took: tests/unit/cli/test_errors.py runs the commands themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.broken_firestore import BrokenFirestore, broken_firestore
from worker_chart_export.adapters.firestore.checked_client import PROBE_SECONDS, cli_firestore
from worker_chart_export.core.exceptions import UsageError

BATCH_GET = "/google.firestore.v1.Firestore/BatchGetDocuments"


@pytest.fixture
def hanging_firestore(monkeypatch: pytest.MonkeyPatch) -> Iterator[BrokenFirestore]:
    with broken_firestore("hangs") as server:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", server.host)  # the library reads it
        yield server


def test_the_first_read_waits_its_deadline_once_and_says_so(hanging_firestore: BrokenFirestore) -> None:
    with pytest.raises(UsageError) as raised, cli_firestore(None, hanging_firestore.host):
        pytest.fail("a Firestore that never answered was taken as checked")
    assert str(raised.value) == (
        f"Firestore emulator at {hanging_firestore.host} did not answer within 5 s: is the emulator running?"
    )
    [call] = hanging_firestore.calls  # not retried: the library's policy would send it again
    assert call.method == BATCH_GET
    # the deadline left when the server's thread read it: on a busy machine it may have run
    # out; the grpc-timeout header rounds up by a few ms (5.0085 s seen under load), as
    # BrokenFirestore.gave_up_within allows
    assert PROBE_SECONDS == 5.0
    assert call.deadline is not None and call.deadline <= PROBE_SECONDS + 0.1
