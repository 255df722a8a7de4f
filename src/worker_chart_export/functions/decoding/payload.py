"""A Firestore event's payload, in any of the shapes met in practice, split into its new and
old documents, each still serialized (nothing is built here):
- production Eventarc: `application/protobuf` DocumentEventData bytes;
- the Firestore emulator: base64 text of those bytes (as str or bytes);
- JSON: the Firestore REST shape `{"value": {"name", "fields": {<typed Value JSON>}}, ...}`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any, Literal

from google.protobuf.message import DecodeError

from worker_chart_export.core.exceptions import PoisonEvent
from worker_chart_export.functions.decoding.skim import RawDocumentEventData, SkimEventData

PayloadFormat = Literal["protobuf", "base64-protobuf", "json"]

# A raw DocumentEventData starts with the tag byte of field 1, 2 or 3 (0x0a/0x12/0x1a),
# none of which is a base64 character; base64 text always starts with one.
_BASE64_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def split_event_payload(data: object) -> tuple[bytes | None, bytes | None, PayloadFormat]:
    """Any of the three payload shapes -> (value, old_value, shape), each document still
    serialized (None when absent)."""
    if data is None or (isinstance(data, str | bytes | bytearray) and not data):
        raise PoisonEvent("empty payload")
    if isinstance(data, Mapping):
        return (*_json_documents(data), "json")
    if isinstance(data, str):
        text = data.strip()
        if text.startswith("{"):
            return (*_json_documents(_load_json_object(text)), "json")
        try:
            data = text.encode("ascii")
        except UnicodeEncodeError:
            raise PoisonEvent("text payload is neither JSON nor base64") from None
    if not isinstance(data, bytes | bytearray | memoryview):
        raise PoisonEvent(f"unsupported payload type {type(data).__name__}")

    raw = bytes(data)
    if not raw:
        raise PoisonEvent("empty payload")
    if raw[:1] == b"{":
        return (*_json_documents(_load_json_object(raw)), "json")
    if raw[0] in _BASE64_ALPHABET:
        decoded = _base64_bytes(raw)
        if decoded is not None:
            try:
                return (*_protobuf_documents(decoded), "base64-protobuf")
            except DecodeError:
                pass  # base64-looking bytes that are not an event: try them as protobuf
    try:
        return (*_protobuf_documents(raw), "protobuf")
    except DecodeError:
        raise PoisonEvent(
            f"payload ({len(raw)} bytes) is neither a DocumentEventData protobuf, nor base64 of one, nor JSON"
        ) from None


def _json_documents(payload: Mapping[str, Any]) -> tuple[bytes | None, bytes | None]:
    # json_format is only needed for this shape, which production does not send
    from google.protobuf import json_format

    message = RawDocumentEventData()
    try:
        json_format.ParseDict(dict(payload), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise PoisonEvent(f"JSON payload is not a DocumentEventData: {excerpt(str(exc), 200)}") from None
    except RecursionError:
        raise PoisonEvent("JSON payload is nested too deeply to be a DocumentEventData") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # json_format's own checks stop short of some values (`"nullValue": Infinity`)
        raise PoisonEvent(f"JSON payload is not a DocumentEventData: {type(exc).__name__}: {exc}") from None
    return _serialized_documents(message)


def _serialized_documents(event_data: Any) -> tuple[bytes | None, bytes | None]:
    return (
        event_data.value.SerializeToString() if event_data.HasField("value") else None,
        event_data.old_value.SerializeToString() if event_data.HasField("old_value") else None,
    )


def _load_json_object(text: str | bytes) -> Mapping[str, Any]:
    try:
        loaded = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise PoisonEvent("payload looks like JSON but does not parse") from None
    except RecursionError:
        raise PoisonEvent("payload is JSON nested too deeply to parse") from None
    if not isinstance(loaded, Mapping):
        raise PoisonEvent(f"JSON payload is a {type(loaded).__name__}, not an object")
    return loaded


def _base64_bytes(raw: bytes) -> bytes | None:
    """The emulator's base64 text -> the protobuf bytes; None when it is not base64."""
    try:
        return base64.b64decode(raw.strip(), validate=True)
    except binascii.Error:
        return None


def _protobuf_documents(raw: bytes) -> tuple[bytes | None, bytes | None]:
    """Raises DecodeError when the bytes are not a DocumentEventData."""
    event_data = SkimEventData.FromString(raw)
    if len(event_data.value) > 1 or len(event_data.old_value) > 1:
        # a message field given twice is merged by protobuf: let upb do it properly
        return _serialized_documents(RawDocumentEventData.FromString(raw))
    return (
        event_data.value[0] if event_data.value else None,
        event_data.old_value[0] if event_data.old_value else None,
    )


def excerpt(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"
