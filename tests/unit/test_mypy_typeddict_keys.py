"""scripts/mypy_typeddict_keys.py, as pyproject's mypy runs it: a `.get` of a key a document
of core/documents.py lacks is an error; its own keys read as mypy types them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]

READS = """
from worker_chart_export.core.documents import StepDocument

def attempt(step: StepDocument) -> int | None:
    reveal_type(step.get("attempt"))
    return step.get({key!r})
"""


def _mypy(tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    monkeypatch.chdir(REPO)  # pyproject's mypy_path ("src") and plugin path are the repo's
    source = tmp_path / "reads.py"
    source.write_text(READS.format(key=key), encoding="utf-8")
    config = ["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")]
    out, err, status = api.run([*config, str(source)])
    return out + err, status


def test_a_key_the_typed_document_lacks_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, status = _mypy(tmp_path, "atempt", monkeypatch)
    assert status == 1
    assert 'TypedDict "StepDocument" has no key "atempt"  [typeddict-unknown-key]' in out


def test_the_document_s_own_keys_read_as_their_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, status = _mypy(tmp_path, "attempt", monkeypatch)
    assert 'Revealed type is "int | None"' in out  # mypy's own hook still types the read
    assert "error" not in out and status == 0
