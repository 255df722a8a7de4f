"""Firestore's document id rules as a pure function (the decoder's poison check)."""

from __future__ import annotations

import pytest

from worker_chart_export.core.document_ids import MAX_DOCUMENT_ID_BYTES, document_id_problem


@pytest.mark.parametrize(
    ("document_id", "problem"),
    [
        ("", "document id is empty"),
        (".", "document id '.' is reserved ('.' and '..' are not allowed)"),
        ("..", "document id '..' is reserved ('.' and '..' are not allowed)"),
        ("__x__", "document id matches __.*__ (reserved by Firestore)"),
        ("____", "document id matches __.*__ (reserved by Firestore)"),
        ("__a\nb__", "document id matches __.*__ (reserved by Firestore)"),
        ("a/b", "document id contains '/'"),
        ("r" * (MAX_DOCUMENT_ID_BYTES + 1), "document id is 1501 bytes (Firestore allows at most 1500)"),
        (
            "é" * 751,
            "document id is 1502 bytes (Firestore allows at most 1500)",
        ),  # UTF-8 bytes, not characters
        ("bad\udc80", "document id is not valid UTF-8"),
    ],
)
def test_ids_firestore_cannot_hold_are_named(document_id: str, problem: str) -> None:
    assert document_id_problem(document_id) == problem


@pytest.mark.parametrize(
    "document_id",
    ["run_20261122_btcusdt_0001", "...", "run..1", "_x_", "__x", "x__", "a%2Fb", "é" * 750, "r" * 1500],
)
def test_ids_firestore_can_hold_pass(document_id: str) -> None:
    assert document_id_problem(document_id) is None
