"""The test harness's Firestore emulator start (tests/harness/firestore_emulator.py): a port
found free but taken before the JVM binds it (a busy machine's other tests) is chosen again;
a port the caller named is not. Once, one such collision errored 149 tests at setup."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from harness import firestore_emulator
from harness.firestore_emulator import PortTakenError, free_port, start_firestore_emulator

pytestmark = pytest.mark.emulators


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_taken_before_the_emulator_binds_it_is_chosen_again(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = iter([taken_port, free_port()])
    monkeypatch.setattr(firestore_emulator, "free_port", lambda: next(chosen))
    with start_firestore_emulator() as emulator:
        assert emulator.port != taken_port and emulator.port > 0


def test_a_port_the_caller_named_is_not_chosen_again(taken_port: int) -> None:
    with pytest.raises(PortTakenError, match="Address already in use"):
        start_firestore_emulator(port=taken_port)
