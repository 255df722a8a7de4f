"""What the decoders make of a deletion, an update and payloads that are no flow_run event:
each field of the decoded event, and the exact reason a poison WARNING line gives."""

from __future__ import annotations

from typing import Any

import pytest

from unit.functions.decoding.test_events import (
    DOC_NAME,
    RUN_ID,
    cloud_event,
    flow_run_fields,
    protobuf_payload,
    step,
)
from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.functions.decoding.events import DecodedEvent, decode_event
from worker_chart_export.functions.decoding.versions import decode_document_version


def test_a_deletion_names_the_old_document_and_no_step() -> None:
    data = protobuf_payload(None, old_fields=flow_run_fields({"s": step()}))
    assert decode_event(cloud_event(data)) == DecodedEvent(
        run_id=RUN_ID,
        document_name=DOC_NAME,
        deleted=True,
        ready_step_ids=(),
        payload_format="protobuf",
    )
    version = decode_document_version(cloud_event(data))
    assert (version.run_id, version.document, version.update_time, version.created) == (
        RUN_ID,
        None,
        None,
        False,
    )


def test_an_update_keeps_the_new_documents_bytes_its_format_and_key() -> None:
    data = protobuf_payload(
        flow_run_fields({"s": step()}), old_fields=flow_run_fields({"s": step(status="PENDING")})
    )
    decoded = decode_event(cloud_event(data))
    assert (decoded.document_name, decoded.deleted, decoded.ready_step_ids) == (DOC_NAME, False, ("s",))
    assert (decoded.payload_format, decoded.flow_key) == ("protobuf", "daily")
    assert decoded.document.name == DOC_NAME  # the new version, parsed from the bytes kept
    assert decode_document_version(cloud_event(data)).created is False


def test_only_steps_that_are_ready_chart_exports_are_candidates() -> None:
    steps = {
        "a": step(status="PENDING"),
        "b": step("LLM_REPORT"),
        "c": step(),
        "d": {"note": "READY CHART_EXPORT"},
    }
    assert decode_event(cloud_event(protobuf_payload(flow_run_fields(steps)))).ready_step_ids == ("c",)


NOT_A_DOCUMENT = b"\x0a\x02\xff\xff"  # a DocumentEventData whose `value` is two bytes that parse as nothing
NO_NAMES = protobuf_payload({"runId": RUN_ID}, name="")  # a document, but unnamed


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (NOT_A_DOCUMENT, "payload document is not a serialized Firestore Document"),
        (NO_NAMES, "payload carries no document (neither value nor oldValue has a name)"),
        (protobuf_payload({"runId": RUN_ID}), "document has no steps field: not a flow_run"),
        (
            protobuf_payload({"runId": RUN_ID, "steps": "x"}),
            "document field steps is not a map: not a flow_run",
        ),
    ],
    ids=["not-a-document", "no-names", "no-steps", "steps-not-a-map"],
)
def test_what_is_no_flow_run_event_is_poison_saying_why(data: Any, reason: str) -> None:
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(data))
    assert raised.value.reason == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (NOT_A_DOCUMENT, "payload document is not a serialized Firestore Document"),
        (NO_NAMES, "payload carries no document (neither value nor oldValue has a name)"),
    ],
    ids=["not-a-document", "no-names"],
)
def test_a_version_that_is_no_document_is_poison_saying_why(data: Any, reason: str) -> None:
    with pytest.raises(PoisonEvent) as raised:
        decode_document_version(cloud_event(data))
    assert raised.value.reason == reason


def test_an_attribute_that_is_no_utf8_read_as_latin1_has_no_such_reading() -> None:
    from worker_chart_export.functions.decoding.names import attribute_readings

    assert attribute_readings("run\xe9") == {"run\xe9"}  # b"run\xe9" is no UTF-8: not a reading
    assert attribute_readings("run\u20ac") == {"run\u20ac"}  # not Latin-1 text at all


def test_a_wrapped_document_converts_as_its_raw_one() -> None:
    """advance_flow and the tests hand proto-plus Documents too: converted as the raw ones."""
    from google.events.cloud.firestore import Document

    from worker_chart_export.functions.decoding.values import document_to_python
    from worker_chart_export.testing import build_document_event_data

    fields = {"runId": RUN_ID, "n": 3, "x": 2.5, "ok": True, "none": None, "list": [1, "a"], "map": {}}
    raw = build_document_event_data(DOC_NAME, fields).value
    assert document_to_python(Document.wrap(raw)) == document_to_python(raw) == fields
