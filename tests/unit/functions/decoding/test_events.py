"""Decoding Firestore CloudEvents for flow_runs: the three payload shapes, runId, step choice."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from google.events.cloud.firestore import DocumentEventData
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import SAMPLE_FLOW_RUN
from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.core.step.selection import ready_chart_export_step_ids
from worker_chart_export.functions.decoding.events import decode_event
from worker_chart_export.functions.decoding.names import resolve_run_id
from worker_chart_export.functions.decoding.values import (
    document_to_python,
    firestore_value_to_python,
    step_to_python,
)
from worker_chart_export.functions.decoding.versions import decode_document_version
from worker_chart_export.testing import (
    build_document_event_data,
    document_resource_name,
    python_to_firestore_value,
)

RUN_ID = "RUN1"
DOC_NAME = document_resource_name("demo-project", f"flow_runs/{RUN_ID}")
UPDATED = "google.cloud.firestore.document.v1.updated"


def step(step_type: str = "CHART_EXPORT", status: str = "READY", **extra: Any) -> dict[str, Any]:
    return {"stepType": step_type, "status": status, **extra}


def flow_run_fields(steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"runId": RUN_ID, "flowKey": "daily", "scope": {"symbol": "BTCUSDT"}, "steps": steps, **extra}


def protobuf_payload(
    fields: dict[str, Any] | None, *, name: str = DOC_NAME, old_fields: dict[str, Any] | None = None
) -> bytes:
    return build_document_event_data(name, fields, old_fields).SerializeToString()


def json_payload(fields: dict[str, Any], *, name: str = DOC_NAME) -> dict[str, Any]:
    """The Firestore REST/JSON shape, as protobuf's JSON mapping writes it (int64 as string)."""
    return json_format.MessageToDict(build_document_event_data(name, fields))


def cloud_event(data: Any, **attributes: str) -> CloudEvent:
    return CloudEvent({"type": UPDATED, "source": "//firestore.googleapis.com/test", **attributes}, data)


def subject_event(data: Any, run_id: str = RUN_ID) -> CloudEvent:
    return cloud_event(data, subject=f"documents/flow_runs/{run_id}")


# --- the three payload shapes -----------------------------------------------------------


def test_protobuf_bytes_as_eventarc_sends_them() -> None:
    fields = flow_run_fields({"charts_1h": step()})
    decoded = decode_event(subject_event(protobuf_payload(fields)))
    assert decoded.payload_format == "protobuf"
    assert decoded.run_id == RUN_ID
    assert decoded.document_name == DOC_NAME
    assert decoded.deleted is False
    assert decoded.ready_step_ids == ("charts_1h",)
    assert decoded.chosen_step_id == "charts_1h"
    assert decoded.flow_key == "daily"


@pytest.mark.parametrize("as_text", [False, True], ids=["bytes", "str"])
def test_base64_text_as_the_emulator_sends_it(as_text: bool) -> None:
    encoded = base64.b64encode(protobuf_payload(flow_run_fields({"charts_1h": step()})))
    data: str | bytes = encoded.decode("ascii") if as_text else encoded
    decoded = decode_event(subject_event(data))
    assert decoded.payload_format == "base64-protobuf"
    assert decoded.ready_step_ids == ("charts_1h",)


def test_base64_with_trailing_newline_is_accepted() -> None:
    encoded = base64.b64encode(protobuf_payload(flow_run_fields({"s": step()}))) + b"\n"
    assert decode_event(subject_event(encoded)).ready_step_ids == ("s",)


def test_base64_with_a_character_outside_its_alphabet_is_poison_not_read_without_it() -> None:
    """The emulator sends plain base64: text with another character in it was damaged on the
    way, and is refused rather than read as the event its other characters spell."""
    encoded = base64.b64encode(protobuf_payload(flow_run_fields({"s": step()})))
    damaged = encoded[:8] + b"*" + encoded[8:]
    with pytest.raises(PoisonEvent, match="neither a DocumentEventData protobuf, nor base64 of one"):
        decode_event(subject_event(damaged))


def test_json_payload_with_typed_rest_values() -> None:
    payload = json_payload(flow_run_fields({"charts_1h": step(inputs={"minImages": 2})}))
    # the REST shape really is what we think it is: camelCase, integers as strings
    assert payload["value"]["fields"]["steps"]["mapValue"]["fields"]["charts_1h"]["mapValue"]["fields"][
        "inputs"
    ]["mapValue"]["fields"]["minImages"] == {"integerValue": "2"}
    decoded = decode_event(subject_event(payload))
    assert decoded.payload_format == "json"
    assert decoded.ready_step_ids == ("charts_1h",)
    assert step_to_python(decoded.document, "charts_1h") == step(inputs={"minImages": 2})


def test_json_payload_as_text_is_accepted() -> None:
    payload = json_payload(flow_run_fields({"charts_1h": step()}))
    decoded = decode_event(subject_event(json.dumps(payload)))
    assert (decoded.payload_format, decoded.chosen_step_id) == ("json", "charts_1h")


def test_json_payload_with_old_value_and_unknown_keys() -> None:
    payload = json_payload(flow_run_fields({"s": step()}))
    payload["oldValue"] = json_payload(flow_run_fields({"s": step(status="PENDING")}))["value"]
    payload["somethingNew"] = {"x": 1}
    assert decode_event(subject_event(payload)).ready_step_ids == ("s",)


def test_all_three_shapes_decode_the_same_document() -> None:
    fields = json.loads(SAMPLE_FLOW_RUN.read_text())
    raw = protobuf_payload(fields)
    shapes = [raw, base64.b64encode(raw), base64.b64encode(raw).decode(), json_payload(fields)]
    documents = [document_to_python(decode_event(subject_event(s)).document) for s in shapes]
    assert all(document == fields for document in documents)


# --- runId ------------------------------------------------------------------------------


def test_run_id_from_subject() -> None:
    decoded = decode_event(
        cloud_event(protobuf_payload(flow_run_fields({})), subject="documents/flow_runs/RUN1")
    )
    assert decoded.run_id == "RUN1"


def test_run_id_from_document_attribute() -> None:
    decoded = decode_event(cloud_event(protobuf_payload(flow_run_fields({})), document="flow_runs/RUN1"))
    assert decoded.run_id == "RUN1"


def test_run_id_from_payload_name_when_the_event_has_no_path_attributes() -> None:
    decoded = decode_event(cloud_event(protobuf_payload(flow_run_fields({}))))
    assert decoded.run_id == "RUN1"


def test_subject_and_payload_naming_different_runs_is_poison() -> None:
    with pytest.raises(PoisonEvent, match="subject names flow_runs/OTHER"):
        decode_event(subject_event(protobuf_payload(flow_run_fields({})), run_id="OTHER"))


def test_unsafe_run_id_is_still_decoded() -> None:
    # execute_step finalizes such a step FAILED (VALIDATION_FAILED): the filter must not hide it
    name = document_resource_name("p", "flow_runs/run with space")
    decoded = decode_event(
        cloud_event(
            protobuf_payload(flow_run_fields({"s": step()}), name=name),
            subject="documents/flow_runs/run with space",
        )
    )
    assert (decoded.run_id, decoded.chosen_step_id) == ("run with space", "s")


def named_event(run_id: str, subject_id: str, **attributes: str) -> CloudEvent:
    """A READY step's event whose payload names flow_runs/<run_id> and whose subject carries
    `subject_id` as the header arrived."""
    payload = protobuf_payload(
        flow_run_fields({"s": step()}), name=document_resource_name("p", f"flow_runs/{run_id}")
    )
    return cloud_event(payload, subject=f"documents/flow_runs/{subject_id}", **attributes)


@pytest.mark.parametrize(
    ("run_id", "subject_id"),
    [
        ("run%41x", "run%41x"),  # as the emulator sends it: unencoded
        ("run%41x", "run%2541x"),  # as the CloudEvents HTTP binding encodes it: decoded once
        ("a%b", "a%b"),
        ("a%b", "a%25b"),
        ("run 1", "run%201"),
        ("run%2Fx", "run%252Fx"),  # a %2F in an id is three characters, never a slash
        ("runé", "runÃ©"),  # its UTF-8 bytes read as Latin-1, as WSGI reads a header
        ("runé", "run%C3%A9"),
        ("runAx", "run%41x"),  # an encoded A, decoded once, is an A
    ],
)
def test_the_run_id_is_the_payloads_whatever_the_subjects_encoding(run_id: str, subject_id: str) -> None:
    decoded = decode_event(named_event(run_id, subject_id))
    assert (decoded.run_id, decoded.chosen_step_id) == (run_id, "s")
    assert decode_document_version(named_event(run_id, subject_id)).run_id == run_id


@pytest.mark.parametrize(
    ("run_id", "subject_id"),
    [("run%41x", "run%252541x"), ("runAx", "run%2541x"), ("run%41x", "runAx"), ("a", "b")],
    ids=["decoded-twice", "decoded-twice-to-A", "payload-decoded", "another-run"],
)
def test_a_subject_that_decoded_once_is_another_id_is_poison(run_id: str, subject_id: str) -> None:
    with pytest.raises(PoisonEvent, match=f"subject names flow_runs/{subject_id} but the payload is"):
        decode_event(named_event(run_id, subject_id))


def test_a_subject_alone_is_decoded_once() -> None:
    # decode_event always has the payload's name; the rule holds for any caller without one
    event = cloud_event(b"", subject="documents/flow_runs/run%2541x")
    assert resolve_run_id(event, "") == "run%41x"


# --- step choice ------------------------------------------------------------------------


def test_several_ready_chart_export_steps_smallest_id_wins() -> None:
    steps = {"charts_4h": step(), "charts_1h": step(), "charts_1D": step()}
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    # plain sorted(): uppercase sorts before lowercase, so "charts_1D" < "charts_1h"
    assert decoded.ready_step_ids == ("charts_1D", "charts_1h", "charts_4h")
    assert decoded.chosen_step_id == "charts_1D"


def test_ready_steps_of_other_types_are_ignored() -> None:
    steps = {"a_llm": step("LLM_REPORT"), "b_ohlcv": step("OHLCV_EXPORT"), "c_charts": step()}
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == ("c_charts",)


@pytest.mark.parametrize("status", ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "ready", ""])
def test_chart_export_steps_not_ready_are_ignored(status: str) -> None:
    steps = {"charts": step(status=status), "llm": step("LLM_REPORT")}
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == ()
    assert decoded.chosen_step_id is None


def test_malformed_steps_are_skipped_not_fatal() -> None:
    steps = {
        "a_string": "READY",
        "b_list": ["CHART_EXPORT", "READY"],
        "c_int_status": {"stepType": "CHART_EXPORT", "status": 1},
        "d_ok": step(),
    }
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == ("d_ok",)


def test_empty_steps_map_is_a_flow_run_with_nothing_to_do() -> None:
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields({}))))
    assert decoded.ready_step_ids == ()


@pytest.mark.parametrize(
    "step_ids",
    [
        ["with space", "b"],
        ["dots.in.id", "dots-in-id"],
        ["`backtick`", "a`b"],
        ["ünïcødé", "日本語", "z"],
        ["UPPER", "lower", "123", "_under"],
    ],
)
def test_odd_step_ids_are_kept_verbatim_and_sorted_plainly(step_ids: list[str]) -> None:
    steps = {step_id: step() for step_id in step_ids}
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == tuple(sorted(step_ids))
    assert step_to_python(decoded.document, decoded.ready_step_ids[0]) == step()


def test_filter_agrees_with_the_dict_selection_of_the_core() -> None:
    steps = {
        f"s{i:02d}": step(("CHART_EXPORT", "LLM_REPORT")[i % 2], ("READY", "RUNNING", "PENDING")[i % 3])
        for i in range(30)
    }
    fields = flow_run_fields(steps)
    decoded = decode_event(subject_event(protobuf_payload(fields)))
    assert list(decoded.ready_step_ids) == ready_chart_export_step_ids(fields)
    assert decoded.ready_step_ids  # the case is not vacuous


# --- deleted, poison --------------------------------------------------------------------


def test_deleted_document_is_decoded_as_deleted() -> None:
    payload = protobuf_payload(None, old_fields=flow_run_fields({"s": step()}))
    decoded = decode_event(subject_event(payload))
    assert decoded.deleted is True
    assert decoded.run_id == RUN_ID
    assert decoded.chosen_step_id is None


def test_deleted_document_with_an_empty_value_is_decoded_as_deleted() -> None:
    event_data = build_document_event_data(DOC_NAME, None, flow_run_fields({"s": step()}))
    event_data.value.SetInParent()  # present but empty: name == ""
    decoded = decode_event(subject_event(event_data.SerializeToString()))
    assert decoded.deleted is True


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe garbage \x00\x01", "neither a DocumentEventData protobuf"),
        (b"not base64 at all!", "neither a DocumentEventData protobuf"),
        ("ünïcødé text", "neither JSON nor base64"),
        (b"", "empty payload"),
        (None, "empty payload"),
        (b"{not json", "does not parse"),
        ([1, 2, 3], "unsupported payload type"),
        ({"value": {"name": DOC_NAME, "fields": {"n": {"integerValue": "abc"}}}}, "not a DocumentEventData"),
        (b"\n\x00", "payload carries no document"),
    ],
)
def test_undecodable_payloads_are_poison(data: Any, reason: str) -> None:
    with pytest.raises(PoisonEvent, match=reason):
        decode_event(subject_event(data))


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("other_collection/RUN1", "is not a flow_runs/{runId} document"),
        ("flow_runs/RUN1/attempts/A1", "is not a flow_runs/{runId} document"),
        ("flow_runs", "is not a flow_runs/{runId} document"),
    ],
)
def test_documents_outside_flow_runs_are_poison(path: str, reason: str) -> None:
    payload = protobuf_payload(flow_run_fields({"s": step()}), name=document_resource_name("p", path))
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(payload, subject=f"documents/{path}"))
    assert raised.value.reason == f"subject {path!r} {reason}"  # the reason names where it read the path
    with pytest.raises(PoisonEvent) as raised:  # same verdict from the payload alone
        decode_event(cloud_event(payload))
    assert raised.value.reason == f"payload document {path!r} {reason}"
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(payload, document=path))
    assert raised.value.reason == f"document attribute {path!r} {reason}"


def test_a_flow_runs_collection_under_another_document_is_not_the_flow_runs() -> None:
    path = "tenants/documents/flow_runs/RUN1"  # a document named "documents", then flow_runs
    payload = protobuf_payload(flow_run_fields({"s": step()}), name=document_resource_name("p", path))
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(payload))
    assert raised.value.reason == f"payload document {path!r} is not a flow_runs/{{runId}} document"


def test_a_document_attribute_naming_another_run_is_poison() -> None:
    payload = protobuf_payload(flow_run_fields({"s": step()}))  # names flow_runs/RUN1
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(payload, document="flow_runs/OTHER"))
    assert raised.value.reason == (
        "document attribute names flow_runs/OTHER but the payload is flow_runs/RUN1"
    )


@pytest.mark.parametrize("attribute", ["subject", "document"])
def test_a_path_attribute_that_is_no_text_is_not_read(attribute: str) -> None:
    """A structured-mode event may carry any JSON value: only text names a document."""
    payload = protobuf_payload(flow_run_fields({"s": step()}))
    event = CloudEvent({"type": UPDATED, "source": "//firestore.googleapis.com/test", attribute: 7}, payload)
    assert (decode_event(event).run_id, decode_event(event).chosen_step_id) == (RUN_ID, "s")


def test_an_event_naming_no_document_anywhere_is_poison_saying_so() -> None:
    with pytest.raises(PoisonEvent) as raised:
        resolve_run_id(cloud_event(b""), "")
    assert raised.value.reason == "event names no document (no subject, document attribute or name)"


def test_subject_that_is_not_a_document_is_poison() -> None:
    payload = protobuf_payload(flow_run_fields({}))
    with pytest.raises(PoisonEvent, match="not a Firestore document subject"):
        decode_event(cloud_event(payload, subject="buckets/b/objects/o"))


@pytest.mark.parametrize(
    "name",
    [
        "flow_runs/RUN1",
        "projects/p/documents/flow_runs/RUN1",  # no database
        "tenants/p/databases/(default)/documents/flow_runs/RUN1",  # no project
    ],
    ids=["relative", "no-database", "no-project"],
)
def test_malformed_resource_name_is_poison(name: str) -> None:
    payload = protobuf_payload(flow_run_fields({}), name=name)
    with pytest.raises(PoisonEvent) as raised:
        decode_event(cloud_event(payload))
    assert raised.value.reason == f"document name {name!r} is not a Firestore resource name"


def test_document_without_steps_is_not_a_flow_run() -> None:
    fields = {"runId": RUN_ID, "flowKey": "daily"}
    with pytest.raises(PoisonEvent, match="no steps field"):
        decode_event(subject_event(protobuf_payload(fields)))


def test_steps_that_is_not_a_map_is_not_a_flow_run() -> None:
    with pytest.raises(PoisonEvent, match="steps is not a map"):
        decode_event(subject_event(protobuf_payload({"steps": ["charts_1h"]})))


# --- the full converter -----------------------------------------------------------------


def test_integers_stay_integers_and_types_round_trip() -> None:
    moment = datetime(2026, 11, 22, 4, 12, 3, 123000, tzinfo=UTC)
    original = {
        "int": 2,
        "big": 2**53 + 1,
        "negative": -7,
        "float": 1.5,
        "bool": True,
        "none": None,
        "text": "x",
        "bytes": b"\x00\x01",
        "when": moment,
        "list": [1, "a", [2], {"k": 3}],
        "empty_map": {},
        "empty_list": [],
    }
    value = python_to_firestore_value(original)
    converted = firestore_value_to_python(value)
    assert converted == original
    assert type(converted["int"]) is int and type(converted["big"]) is int
    assert type(converted["bool"]) is bool


def test_converter_accepts_proto_plus_values_too() -> None:
    event = DocumentEventData.deserialize(protobuf_payload(flow_run_fields({"s": step(n=3)})))
    assert firestore_value_to_python(event.value.fields["steps"]) == {"s": step(n=3)}


def test_converter_reads_geo_points_references_and_json_integers() -> None:
    payload = {
        "value": {
            "name": DOC_NAME,
            "fields": {
                "steps": {"mapValue": {}},
                "where": {"geoPointValue": {"latitude": 1.5, "longitude": -2.0}},
                "ref": {"referenceValue": "projects/p/databases/(default)/documents/a/b"},
                "count": {"integerValue": "12"},
                "at": {"timestampValue": "2026-11-22T04:12:03.123Z"},
            },
        }
    }
    document = document_to_python(decode_event(subject_event(payload)).document)
    assert document["where"] == {"latitude": 1.5, "longitude": -2.0}
    assert document["ref"] == "projects/p/databases/(default)/documents/a/b"
    assert document["count"] == 12 and type(document["count"]) is int
    assert document["at"] == datetime(2026, 11, 22, 4, 12, 3, 123000, tzinfo=UTC)
    assert document["steps"] == {}


def test_step_to_python_of_a_missing_step_is_none() -> None:
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields({"s": step()}))))
    assert step_to_python(decoded.document, "nope") is None


# --- the skim: candidates by bytes, verdict by the real Value -----------------------------


@pytest.mark.parametrize(
    "decoy",
    [
        {"stepType": "CHART_EXPORT", "status": "RUNNING", "note": "READY"},
        {"stepType": "LLM_REPORT", "status": "READY", "inputs": {"kind": "CHART_EXPORT"}},
        {"stepType": "CHART_EXPORT", "status": "PENDING", "inputs": {"status": "READY"}},
        {"stepType": "CHART_EXPORT_V2", "status": "READY"},
        {"stepType": "CHART_EXPORT", "status": "READY_SOON"},
        {"stepType": ["CHART_EXPORT"], "status": "READY"},
    ],
)
def test_steps_that_merely_mention_the_words_are_not_selected(decoy: dict[str, Any]) -> None:
    steps = {"decoy": decoy, "real": step()}
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == ("real",)


def test_update_mask_and_old_value_do_not_disturb_the_filter() -> None:
    event_data = build_document_event_data(
        DOC_NAME, flow_run_fields({"s": step()}), flow_run_fields({"s": step(status="PENDING")})
    )
    event_data.update_mask.field_paths.append("steps.s.status")
    decoded = decode_event(subject_event(event_data.SerializeToString()))
    assert decoded.ready_step_ids == ("s",)


def test_a_value_split_over_two_wire_fields_is_merged_as_protobuf_does() -> None:
    # protobuf concatenation merges messages: the fast splitter must defer to upb here
    first = build_document_event_data(DOC_NAME, {"flowKey": "daily"}).SerializeToString()
    second = build_document_event_data(DOC_NAME, {"steps": {"s": step()}}).SerializeToString()
    decoded = decode_event(subject_event(first + second))
    assert (decoded.flow_key, decoded.ready_step_ids) == ("daily", ("s",))


def test_an_old_value_split_over_two_wire_fields_is_merged_as_protobuf_does() -> None:
    # a deletion whose name comes in the second piece: read alone, the first names nothing
    first = build_document_event_data("", None, {"flowKey": "daily"}).SerializeToString()
    second = build_document_event_data(DOC_NAME, None, {"steps": {}}).SerializeToString()
    decoded = decode_event(cloud_event(first + second))
    assert (decoded.deleted, decoded.run_id, decoded.document_name) == (True, RUN_ID, DOC_NAME)


def test_unknown_top_level_fields_are_tolerated() -> None:
    unknown_field = b"\x22\x03abc"  # field 4, length-delimited: not in DocumentEventData
    payload = protobuf_payload(flow_run_fields({"s": step()})) + unknown_field
    assert decode_event(subject_event(payload)).ready_step_ids == ("s",)


def test_document_is_parsed_only_on_demand() -> None:
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields({"s": step()}))))
    assert "document" not in decoded.__dict__  # nothing built by the filter itself
    assert document_to_python(decoded.document)["flowKey"] == "daily"


@pytest.mark.parametrize(
    "steps",
    [
        {"charts": step(status="RUNNING"), "llm": step("LLM_REPORT", "PENDING")},
        {"llm": step("LLM_REPORT"), "ohlcv": step("OHLCV_EXPORT")},
    ],
    ids=["no-READY-anywhere", "no-CHART_EXPORT-anywhere"],
)
def test_documents_lacking_either_word_skip_the_per_step_scan(
    steps: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker_chart_export.functions.decoding.events as events_module

    def scan_must_not_run(_: Any) -> list[bytes]:
        raise AssertionError("per-step scan ran")

    monkeypatch.setattr(events_module, "_candidate_entries", scan_must_not_run)
    decoded = decode_event(subject_event(protobuf_payload(flow_run_fields(steps))))
    assert decoded.ready_step_ids == ()
    with pytest.raises(AssertionError, match="per-step scan ran"):  # the scan is reachable
        decode_event(subject_event(protobuf_payload(flow_run_fields({"s": step()}))))


def test_a_corrupt_candidate_step_makes_the_event_poison_not_a_crash() -> None:
    from worker_chart_export.functions.decoding.skim import SkimDocument, SkimEventData

    # bytes the real Document parser rejects, which the skim only meets at the candidate
    document = SkimDocument(name=DOC_NAME)
    document.fields["steps"].map_value.entries.append(b"\xff\xff READY CHART_EXPORT")
    payload = SkimEventData(value=[document.SerializeToString()]).SerializeToString()
    with pytest.raises(DecodeError):
        DocumentEventData.deserialize(payload)
    with pytest.raises(PoisonEvent) as raised:
        decode_event(subject_event(payload))
    assert raised.value.reason == "document is corrupt: a steps entry does not parse"


# --- the whole version, for advance_flow -------------------------------------------------


UPDATE_TIME = datetime(2026, 11, 22, 4, 8, 40, 123456, tzinfo=UTC)


def versioned_payload(
    fields: dict[str, Any] | None,
    old_fields: dict[str, Any] | None,
    *,
    seconds: int = int(UPDATE_TIME.timestamp()),
    nanos: int = UPDATE_TIME.microsecond * 1000,
) -> bytes:
    event_data = build_document_event_data(DOC_NAME, fields, old_fields)
    if fields is not None:
        event_data.value.update_time.seconds = seconds
        event_data.value.update_time.nanos = nanos
    serialized: bytes = event_data.SerializeToString()
    return serialized


def test_a_created_document_is_a_version_marked_created() -> None:
    fields = flow_run_fields({"s": step(status="PENDING")}, status="PENDING")
    version = decode_document_version(subject_event(versioned_payload(fields, None)))
    assert (version.run_id, version.created, version.document) == (RUN_ID, True, fields)
    assert version.update_time == UPDATE_TIME


def test_a_creation_whose_old_value_is_present_but_empty_is_still_a_creation() -> None:
    """An empty oldValue names no document (as an empty value names no new one): no old
    version, so the event is the document's creation and advance_flow starts the run."""
    fields = flow_run_fields({"s": step(status="PENDING")}, status="PENDING")
    event_data = build_document_event_data(DOC_NAME, fields, None)
    event_data.old_value.SetInParent()  # present but empty: name == ""
    assert decode_document_version(subject_event(event_data.SerializeToString())).created is True


def test_an_updated_document_is_a_version_not_created() -> None:
    fields = flow_run_fields({"s": step()})
    version = decode_document_version(subject_event(versioned_payload(fields, flow_run_fields({}))))
    assert (version.created, version.document) == (False, fields)


def test_a_deleted_document_has_no_version() -> None:
    version = decode_document_version(subject_event(versioned_payload(None, flow_run_fields({}))))
    assert (version.run_id, version.document, version.update_time) == (RUN_ID, None, None)


FORGED_TIMES = {
    "seconds-1e13": {"seconds": 10**13},
    "seconds-negative": {"seconds": -(10**13)},
    "year-zero": {"seconds": -62_135_596_801},
    "nanos-over-a-second": {"nanos": 10**9 + 1},
    "nanos-negative": {"nanos": -1},
}


@pytest.mark.parametrize("forged", list(FORGED_TIMES.values()), ids=list(FORGED_TIMES))
def test_an_update_time_firestore_never_writes_is_poison(forged: dict[str, int]) -> None:
    payload = versioned_payload(flow_run_fields({"s": step()}), None, **forged)
    with pytest.raises(PoisonEvent, match="timestamp Firestore never writes: Timestamp is not valid"):
        decode_document_version(subject_event(payload))


def test_a_timestamp_field_firestore_never_writes_is_poison() -> None:
    event_data = build_document_event_data(DOC_NAME, flow_run_fields({"s": step()}))
    event_data.value.update_time.FromDatetime(UPDATE_TIME)
    forged_step = event_data.value.fields["steps"].map_value.fields["s"].map_value
    forged_step.fields["at"].timestamp_value.seconds = 10**13
    with pytest.raises(PoisonEvent, match="Seconds 10000000000000 must be in range"):
        decode_document_version(subject_event(event_data.SerializeToString()))


def test_a_document_without_an_update_time_is_a_version_without_one() -> None:
    payload = protobuf_payload(flow_run_fields({"s": step()}))
    version = decode_document_version(subject_event(payload))
    assert (version.document, version.update_time) == (flow_run_fields({"s": step()}), None)


INFINITE_NULL = {"value": {"name": DOC_NAME, "fields": {"n": {"nullValue": float("inf")}}}}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"value":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (json.dumps(INFINITE_NULL), "OverflowError"),
        (INFINITE_NULL, "OverflowError"),
        (memoryview(b""), "empty payload"),
    ],
    ids=["deep-json-in-bytes", "infinite-null-text", "infinite-null-dict", "empty-memoryview"],
)
def test_payloads_that_broke_the_parsers_are_poison_for_both_decoders(data: Any, reason: str) -> None:
    for decode in (decode_event, decode_document_version):
        with pytest.raises(PoisonEvent, match=reason):
            decode(subject_event(data))


def _valid_version_event() -> bytes:
    fields = flow_run_fields(
        {"s": step(at=datetime(2026, 11, 22, tzinfo=UTC), n=[1, 2.5, None, b"x", {"k": True}])}
    )
    return versioned_payload(fields, flow_run_fields({}))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_corruption_of_an_event_is_decoded_or_poison_never_a_crash(data: st.DataObject) -> None:
    raw = bytearray(_valid_version_event())
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        at = data.draw(st.integers(0, len(raw)), label="at")
        edit = data.draw(st.sampled_from(["set", "delete", "insert"]), label="edit")
        byte = data.draw(st.integers(0, 255), label="byte")
        if edit == "set" and at < len(raw):
            raw[at] = byte
        elif edit == "delete":
            del raw[at : at + data.draw(st.integers(1, 8), label="length")]
        else:
            raw.insert(at, byte)
    for payload in (bytes(raw), base64.b64encode(bytes(raw))):
        for decode in (decode_event, decode_document_version):
            try:
                decoded = decode(subject_event(payload))
            except PoisonEvent:
                continue
            assert decoded.run_id == RUN_ID  # the subject and the payload agreed on the document
