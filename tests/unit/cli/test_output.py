"""cli/output.py's RedactingWriter, the streams every command (`serve` included) writes
through: each line leaves redacted, whole, whoever wrote it and however it was cut up, and the
stream stays usable where a library looks at it (gunicorn, logging, faulthandler)."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading

import pytest

from harness.secret_scan import key_forms, leaks
from worker_chart_export import known_keys
from worker_chart_export.cli.output import RedactingWriter, redacted_output, unwrapped
from worker_chart_export.core.redaction import REDACTED

KEY = "test-key-7d1e0c5b9a2f4e6d8c3b1a0f"


def test_a_key_written_in_pieces_is_redacted_in_the_line_they_make() -> None:
    known_keys.learn([KEY])
    stream = io.StringIO()
    writer = RedactingWriter(stream)
    for form in key_forms(KEY).values():
        cut = len(form) // 2
        writer.write(f"said {form[:cut]}")  # e.g. print(a, b, sep="") of a key cut in two
        writer.write(f"{form[cut:]} twice\n")
    assert leaks([stream.getvalue()], [KEY]) == []
    assert stream.getvalue().count(REDACTED) >= len(key_forms(KEY))


def test_an_unfinished_line_waits_for_its_end_or_a_flush() -> None:
    known_keys.learn([KEY])
    stream = io.StringIO()
    writer = RedactingWriter(stream)
    writer.write("prompt: ")
    assert stream.getvalue() == ""
    writer.flush()
    assert stream.getvalue() == "prompt: "
    writer.writelines([f"a {KEY}\n", "b\n"])
    assert stream.getvalue() == f"prompt: a {REDACTED}\nb\n"


def test_the_stream_is_the_wrapped_one_for_what_a_library_asks_of_it() -> None:
    with open(os.devnull, "w") as devnull:
        writer = RedactingWriter(devnull)
        assert writer.fileno() == devnull.fileno()  # gunicorn, faulthandler
        assert writer.isatty() is False and writer.encoding == devnull.encoding


def test_a_logging_handler_made_inside_the_block_writes_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    """gunicorn's error log: a StreamHandler made after the wrap, on sys.stderr."""
    known_keys.learn([KEY])
    logger = logging.getLogger("test.output.gunicorn-like")
    logger.propagate = False
    with redacted_output():
        handler = logging.StreamHandler()  # sys.stderr, as it is now
        logger.addHandler(handler)
        try:
            logger.error("Invalid request from ip=127.0.0.1: '/?k=%s'", KEY)
            logging.lastResort.handle(logging.makeLogRecord({"msg": f"last resort {KEY}"}))  # type: ignore[union-attr]
        finally:
            logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert f"'/?k={REDACTED}'" in err and f"last resort {REDACTED}" in err


def test_what_is_left_of_a_line_is_written_when_the_block_ends(capsys: pytest.CaptureFixture[str]) -> None:
    known_keys.learn([KEY])
    with redacted_output():
        sys.stdout.write(f"no line end {KEY}")
    assert capsys.readouterr().out == f"no line end {REDACTED}"


def test_threads_writing_at_once_lose_nothing() -> None:
    stream = io.StringIO()
    writer = RedactingWriter(stream)

    def write(mark: str) -> None:
        for _ in range(200):
            writer.write(mark * 10)
            writer.write("\n")

    threads = [threading.Thread(target=write, args=(mark,)) for mark in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    text = stream.getvalue()
    assert (text.count("a"), text.count("b"), text.count("\n")) == (2000, 2000, 400)


def test_logs_lines_are_written_past_the_wrapper_they_need_no_second_pass() -> None:
    stream = io.StringIO()
    assert unwrapped(RedactingWriter(stream)) is stream
    assert unwrapped(stream) is stream
