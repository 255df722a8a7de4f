"""The log exit (logs.py's last processor) and where keys become known (known_keys): a line
carries no form of a key the process holds, stays one JSON object, and a line without one is
written as rendered."""

from __future__ import annotations

import json

import pytest

from harness.logs import LogCapture
from harness.secret_scan import key_forms, leaks
from worker_chart_export import known_keys
from worker_chart_export.adapters.chart_img.accounts_config import parse_accounts
from worker_chart_export.core.redaction import REDACTED
from worker_chart_export.logs import get_logger

KEY = 'lk/"ey\\with+odd%chars=0123456789abcdef'


def test_every_form_of_a_known_key_is_redacted_from_a_line(log_capture: LogCapture) -> None:
    known_keys.learn([KEY])
    forms = key_forms(KEY)
    try:
        raise ValueError(f"provider said {forms['url_quote']}")
    except ValueError:
        get_logger().exception(
            "refused",
            reason=forms["json"],
            answers=[{"message": forms["base64_1"]}],
            **{forms["first_10"]: "a key as a field name"},
        )
    (line,) = log_capture.lines()  # still one JSON object
    assert line["message"] == "refused" and line["reason"] == REDACTED
    assert REDACTED in line["answers"][0]["message"]  # the blob's bytes around the key stay
    assert line[REDACTED] == "a key as a field name"
    assert "ValueError: provider said <redacted>" in line["exception"]
    assert leaks([log_capture.text], [KEY]) == []


@pytest.mark.parametrize(
    "form",
    [
        "upper_case",
        "mixed_case",
        "hex_upper",
        "backslash_x_lower",
        "html_decimal_padded",
        "html_hex_upper_padded",
    ],
)
def test_a_key_in_another_case_in_hex_or_escaped_for_html_or_c_is_redacted_from_a_line(
    log_capture: LogCapture, form: str
) -> None:
    """Issue 38: written into the line as JSON renders it (a `\\x` escape doubled)."""
    known_keys.learn([KEY])
    get_logger().warning("provider answered", body=f"invalid key: {key_forms(KEY)[form]}!")
    (line,) = log_capture.lines()
    assert line["body"] == f"invalid key: {REDACTED}!"
    assert leaks([log_capture.text], [KEY]) == []


def test_a_line_without_a_key_is_written_as_rendered(log_capture: LogCapture) -> None:
    known_keys.learn([KEY])
    get_logger().info("chart api call finished", note='100% of "it" \\o/', other=KEY[:7])
    (line,) = log_capture.lines()
    assert (line["note"], line["other"]) == ('100% of "it" \\o/', KEY[:7])


def test_a_key_is_known_once_its_accounts_are_parsed(log_capture: LogCapture) -> None:
    get_logger().info("before", value=KEY)
    parse_accounts(json.dumps([{"id": "acc1", "apiKey": KEY}]))
    get_logger().info("after", value=KEY)
    before, after = log_capture.lines()
    assert before["value"] == KEY  # not a key of this process yet: nothing to redact
    assert after["value"] == REDACTED
    log_capture.stream.truncate(0)  # the first line holds the key on purpose


def test_keys_are_only_added_and_compiled_again_only_when_new() -> None:
    known_keys.learn([KEY])
    first = known_keys.redaction()
    known_keys.learn([KEY])
    assert known_keys.redaction() is first
    known_keys.learn(["another-key-0123456789"])
    assert known_keys.redaction().keys == {KEY, "another-key-0123456789"}
