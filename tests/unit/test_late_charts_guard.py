"""tests/unit/conftest.py's guard: the next test starts once a late chart's thread has ended,
and a chart thread that never ends fails the test that left it."""

from __future__ import annotations

import threading

import pytest

from unit.conftest import wait_for_late_charts


def test_a_late_chart_is_waited_for_until_it_ends() -> None:
    let_go, ended = threading.Event(), threading.Event()

    def late_chart() -> None:
        let_go.wait(60)
        ended.set()

    thread = threading.Thread(target=late_chart, name="chart_7")
    thread.start()
    threading.Timer(0.01, let_go.set).start()  # lets go while the guard waits
    wait_for_late_charts(60)
    assert ended.is_set() and not thread.is_alive()


def test_a_chart_thread_that_never_ends_fails_its_test() -> None:
    let_go = threading.Event()
    thread = threading.Thread(target=let_go.wait, args=(60,), name="chart_8")
    thread.start()
    try:
        with pytest.raises(AssertionError, match="chart_8 still rendering after its test"):
            wait_for_late_charts(0.0)
    finally:
        let_go.set()
        thread.join(60)


def test_other_threads_are_not_waited_for() -> None:
    let_go = threading.Event()
    thread = threading.Thread(target=let_go.wait, args=(60,), name="warm-up")
    thread.start()
    try:
        wait_for_late_charts(0.0)  # no AssertionError: not a chart
        assert thread.is_alive()
    finally:
        let_go.set()
        thread.join(60)
