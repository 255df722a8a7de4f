"""A payload split into its documents (decoding/payload.py): each shape's documents, and for
what is not an event the exact reason the poison WARNING line gives."""

from __future__ import annotations

import ast
import inspect
import sys
from typing import Any

import pytest

from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.functions.decoding.payload import excerpt, split_event_payload

NAME = "projects/p/databases/(default)/documents/flow_runs/R"


def poison_reason(data: Any) -> str:
    with pytest.raises(PoisonEvent) as raised:
        split_event_payload(data)
    return raised.value.reason


def test_a_json_update_carries_both_documents_a_creation_no_old_one_a_deletion_no_new_one() -> None:
    document = {"name": NAME}
    new, old, shape = split_event_payload({"value": document, "oldValue": document})
    assert (shape, new, old) == ("json", b"\n" + bytes([len(NAME)]) + NAME.encode(), new)
    assert split_event_payload({"value": document})[1] is None
    assert split_event_payload({"oldValue": document})[0] is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "payload looks like JSON but does not parse"),
        ("{not json", "payload looks like JSON but does not parse"),
        (b'{"a": ' + b"[" * 100_000, "payload is JSON nested too deeply to parse"),
        (
            {"value": {"name": ["n"]}},
            'JSON payload is not a DocumentEventData: "Failed to parse value field: Failed to parse name '
            "field: expected string or bytes-like object, got 'list'..\"",
        ),
    ],
    ids=["bytes", "text", "nested", "wrong-type"],
)
def test_json_that_is_no_event_is_poison_saying_why(data: Any, reason: str) -> None:
    assert poison_reason(data) == reason


def test_a_long_reason_from_the_json_parser_is_cut_at_200_characters() -> None:
    deep: dict[str, Any] = {"stringValue": "x"}
    for _ in range(300):  # deeper than protobuf's JSON parser goes
        deep = {"mapValue": {"fields": {"a": deep}}}
    reason = poison_reason({"value": {"name": NAME, "fields": {"a": deep}}})
    prefix = "JSON payload is not a DocumentEventData: "
    assert reason.startswith(prefix)
    cut, _, length = reason.removeprefix(prefix).rpartition("... (")
    # a repr of the first 200 characters, then the whole length
    assert len(ast.literal_eval(cut)) == 200 and length.endswith(" chars)")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a" * 80, repr("a" * 80)),  # up to the limit: whole
        ("a" * 81, f"{'a' * 80!r}... (81 chars)"),
        ("", "''"),
    ],
)
def test_an_excerpt_shows_80_characters_then_says_how_long_the_text_was(text: str, shown: str) -> None:
    assert excerpt(text) == shown


def test_an_excerpt_takes_its_own_limit() -> None:
    assert excerpt("abcdef", 3) == "'abc'... (6 chars)"
    assert excerpt("abc", 3) == "'abc'"


def test_json_deeper_than_the_stack_allows_is_poison_not_a_crash() -> None:
    """A thread with little stack left (a deep caller, a small recursion limit) meets Python's
    recursion limit before protobuf's own depth limit: still poison, saying why."""
    deep: dict[str, Any] = {"stringValue": "x"}
    for _ in range(90):
        deep = {"mapValue": {"fields": {"a": deep}}}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)
    try:
        reason = poison_reason({"value": {"name": NAME, "fields": {"a": deep}}})
    finally:
        sys.setrecursionlimit(limit)
    assert reason == "JSON payload is nested too deeply to be a DocumentEventData"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "empty payload"),
        (b"", "empty payload"),
        ("", "empty payload"),
        (bytearray(), "empty payload"),
        (memoryview(b""), "empty payload"),
        ("  \n", "empty payload"),  # blank text: nothing once stripped
        ("ünïcødé text", "text payload is neither JSON nor base64"),
        ([1, 2], "unsupported payload type list"),
        (b"A", "payload (1 bytes) is neither a DocumentEventData protobuf, nor base64 of one, nor JSON"),
    ],
    ids=["none", "bytes", "text", "bytearray", "memoryview", "blank-text", "not-ascii", "list", "one-byte"],
)
def test_what_is_no_payload_is_poison_saying_why(data: Any, reason: str) -> None:
    assert poison_reason(data) == reason


@pytest.mark.parametrize("as_text", [False, True], ids=["bytes", "text"])
def test_json_with_text_beyond_ascii_is_read_as_json(as_text: bool) -> None:
    text = '{"value": {"name": "' + NAME + 'é"}}'
    new, old, shape = split_event_payload(text if as_text else text.encode())
    assert (shape, old) == ("json", None)
    assert new is not None and NAME.encode() + "é".encode() in new
