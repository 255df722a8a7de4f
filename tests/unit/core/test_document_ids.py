"""Firestore's document id rules as a pure function (the decoder's poison check)."""

from __future__ import annotations

import pytest

from worker_chart_export.core.document_ids import MAX_DOCUMENT_ID_BYTES, document_id_problem


@pytest.mark.parametrize(
    ("document_id", "problem"),
    [
        ("", "empty"),
        (".", "'.' is reserved"),
        ("..", "'..' is reserved"),
        ("__x__", "__.*__"),
        ("____", "__.*__"),
        ("__a\nb__", "__.*__"),
        ("a/b", "contains '/'"),
        ("r" * (MAX_DOCUMENT_ID_BYTES + 1), "1501 bytes"),
        ("é" * 751, "1502 bytes"),  # the limit is in UTF-8 bytes, not characters
        ("bad\udc80", "not valid UTF-8"),
    ],
)
def test_ids_firestore_cannot_hold_are_named(document_id: str, problem: str) -> None:
    found = document_id_problem(document_id)
    assert found is not None and problem in found, found


@pytest.mark.parametrize(
    "document_id",
    ["run_20261122_btcusdt_0001", "...", "run..1", "_x_", "__x", "x__", "a%2Fb", "é" * 750, "r" * 1500],
)
def test_ids_firestore_can_hold_pass(document_id: str) -> None:
    assert document_id_problem(document_id) is None
