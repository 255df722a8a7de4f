"""The filter evaluator the alert tests rely on reads its subset the way Cloud Logging does."""

from __future__ import annotations

import json

import pytest
from logging_filter import cloud_run_entry, extract, matches

LINE = json.dumps(
    {
        "severity": "WARNING",
        "message": "chart api call finished",
        "error": {"code": "CHART_API_FAILED"},
        "attempts": 2,
        "timestamp": "2026-01-01T00:00:00Z",
        "logging.googleapis.com/labels": {"runId": "r1"},
    }
)


def test_cloud_run_mapping_moves_special_fields_and_keeps_message() -> None:
    entry = cloud_run_entry(LINE)
    assert entry["severity"] == "WARNING" and entry["labels"] == {"runId": "r1"}
    assert entry["jsonPayload"]["message"] == "chart api call finished"
    assert not {"severity", "timestamp", "logging.googleapis.com/labels"} & set(entry["jsonPayload"])
    assert cloud_run_entry("plain text")["textPayload"] == "plain text"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('jsonPayload.error.code="CHART_API_FAILED"', True),
        ('jsonPayload.error.code="CHART_API"', False),
        ('jsonPayload.error.code:"chart_api"', True),  # has: substring, any case
        ("severity>=WARNING", True),
        ("severity>=ERROR", False),
        ("severity=WARNING AND jsonPayload.attempts>1", True),
        ("severity=ERROR OR jsonPayload.attempts=2", True),
        ('NOT severity=ERROR jsonPayload.message="chart api call finished"', True),  # implicit AND
        ('jsonPayload.missing="x"', False),
        ('jsonPayload.missing!="x"', False),
        ('(severity=ERROR OR severity=WARNING) AND resource.type="cloud_run_revision"', True),
        ('labels.runId="r1" AND resource.labels.service_name="other"', False),
    ],
)
def test_filter_subset(query: str, expected: bool) -> None:
    assert matches(query, cloud_run_entry(LINE)) is expected


@pytest.mark.parametrize("query", ['"bare text"', "severity=", "(severity=ERROR", 'a="x")'])
def test_outside_the_subset_is_refused(query: str) -> None:
    with pytest.raises(ValueError):
        matches(query, cloud_run_entry(LINE))


def test_extract() -> None:
    entry = cloud_run_entry(LINE)
    assert extract("EXTRACT(jsonPayload.error.code)", entry) == "CHART_API_FAILED"
    assert extract("EXTRACT(jsonPayload.nope)", entry) is None
    with pytest.raises(ValueError):
        extract('REGEXP_EXTRACT(jsonPayload.message, "(.*)")', entry)
