"""Protobuf message types that read a Firestore event without building its documents.

The no-op filter (events.py) parses every event with these: the top-level fields are
decoded, each step stays serialized bytes until it could be a READY CHART_EXPORT step.
Also the raw upb classes behind the proto-plus wrappers: parsing and field access on those
skip proto-plus marshalling entirely.
"""

from __future__ import annotations

from typing import Any

from google.events.cloud.firestore import Document, DocumentEventData, MapValue, Value
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

RawDocumentEventData: Any = DocumentEventData.pb()
RawDocument: Any = Document.pb()
RawValue: Any = Value.pb()
PACKAGE = "worker_chart_export.functions.decoding.skim"


def _build_skim_classes() -> tuple[Any, Any, Any]:
    """Message types that read the serialized event without building its documents:

        message SkimEventData { repeated bytes value; repeated bytes old_value; }
        message SkimDocument { string name; map<string, SkimValue> fields; }
        message SkimValue    { string string_value; SkimMap map_value; }  // others: unknown
        message SkimMap      { repeated bytes entries; }  // map entries, left serialized
        message SkimMapEntry { string key; bytes value; }  // one of those, when needed

    A message field and a map entry are length-delimited on the wire, so reading them as
    `bytes` is wire-compatible and parses nothing inside them. Field numbers are copied from
    the real descriptors, so the two schemas stay in step.
    """
    proto_file = _skim_file()
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto_file)

    def message_class(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))

    return (message_class("SkimEventData"), message_class("SkimDocument"), message_class("SkimMapEntry"))


def _skim_file() -> Any:
    """The FileDescriptorProto of the skim messages above."""
    field_type = descriptor_pb2.FieldDescriptorProto
    package = PACKAGE
    proto_file = descriptor_pb2.FileDescriptorProto(
        name="worker_chart_export/skim.proto", package=package, syntax="proto3"
    )

    def number(message_class: Any, field_name: str) -> int:
        return int(message_class.pb().DESCRIPTOR.fields_by_name[field_name].number)

    def add_field(
        message: Any, name: str, field_number: int, kind: int, type_name: str = "", repeated: bool = False
    ) -> None:
        added = message.field.add(
            name=name,
            number=field_number,
            type=kind,
            label=field_type.LABEL_REPEATED if repeated else field_type.LABEL_OPTIONAL,
        )
        if type_name:
            added.type_name = f".{package}.{type_name}"

    skim_event = proto_file.message_type.add(name="SkimEventData")
    # repeated, so that a field given twice (protobuf merges those) can be noticed
    for name in ("value", "old_value"):
        add_field(skim_event, name, number(DocumentEventData, name), field_type.TYPE_BYTES, repeated=True)
    skim_map_entry = proto_file.message_type.add(name="SkimMapEntry")
    add_field(skim_map_entry, "key", 1, field_type.TYPE_STRING)
    add_field(skim_map_entry, "value", 2, field_type.TYPE_BYTES)
    skim_map = proto_file.message_type.add(name="SkimMap")
    add_field(skim_map, "entries", number(MapValue, "fields"), field_type.TYPE_BYTES, repeated=True)
    skim_value = proto_file.message_type.add(name="SkimValue")
    add_field(skim_value, "string_value", number(Value, "string_value"), field_type.TYPE_STRING)
    add_field(skim_value, "map_value", number(Value, "map_value"), field_type.TYPE_MESSAGE, "SkimMap")
    skim_document = proto_file.message_type.add(name="SkimDocument")
    add_field(skim_document, "name", number(Document, "name"), field_type.TYPE_STRING)
    fields_entry = skim_document.nested_type.add(name="FieldsEntry")
    fields_entry.options.map_entry = True
    add_field(fields_entry, "key", 1, field_type.TYPE_STRING)
    add_field(fields_entry, "value", 2, field_type.TYPE_MESSAGE, "SkimValue")
    add_field(
        skim_document,
        "fields",
        number(Document, "fields"),
        field_type.TYPE_MESSAGE,
        "SkimDocument.FieldsEntry",
        repeated=True,
    )

    return proto_file


SkimEventData, SkimDocument, SkimMapEntry = _build_skim_classes()
