"""Which strings Firestore can hold as a document id (its documented limits).

An event naming a document whose id breaks these rules cannot come from Firestore: the
client would reject the id (InvalidArgument) on every redelivery, so the event is poison.
Rules (https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields):
valid UTF-8, at most 1,500 bytes, no forward slash, not solely `.` or `..`, not `__.*__`.
"""

from __future__ import annotations

import re

MAX_DOCUMENT_ID_BYTES = 1500
_RESERVED_ID = re.compile(r"__.*__", re.DOTALL)


def document_id_problem(document_id: str) -> str | None:
    """Why Firestore cannot hold `document_id`, or None when it can."""
    if not document_id:
        return "document id is empty"
    try:
        size = len(document_id.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate, e.g. from JSON "\udc80"
        return "document id is not valid UTF-8"
    if size > MAX_DOCUMENT_ID_BYTES:
        return f"document id is {size} bytes (Firestore allows at most {MAX_DOCUMENT_ID_BYTES})"
    if "/" in document_id:
        return "document id contains '/'"
    if document_id in (".", ".."):
        return f"document id {document_id!r} is reserved ('.' and '..' are not allowed)"
    if _RESERVED_ID.fullmatch(document_id):
        return "document id matches __.*__ (reserved by Firestore)"
    return None
