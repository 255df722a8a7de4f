"""The run page: pure rendering (manifest + bytes -> HTML) and reading from a local bucket mirror."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO
from worker_chart_export.cli.main import main
from worker_chart_export.core.step.manifest_reader import ReadManifest, manifest_of
from worker_chart_export.tools.view import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    ChartImage,
    StepState,
    ViewInputError,
    render_page,
    view_manifest,
)
from worker_chart_export.tools.view.command import default_page_path
from worker_chart_export.tools.view.sources import LoadedRun, load_local, parse_manifest, parse_state

FIXTURE_PNG = (
    REPO / "fixtures/chart-api/chart-img/advanced-chart-v2/BINANCE_BTCUSDT__1h__price_psar_adi_v1.png"
)
BUCKET = "bucket-a"
PREFIX = f"gs://{BUCKET}/charts/run1/charts_1h"


def _item(template: str, **extra: Any) -> dict[str, Any]:
    return {
        "chartTemplateId": template,
        "kind": f"kind of {template}",
        "generatedAt": "2026-11-22T04:12:03.123Z",
        "png_gcs_uri": f"{PREFIX}/20261122T041203123Z_BINANCE-BTCUSDT_1h_{template}.png",
        **extra,
    }


def _failure(
    template: str, code: str = "CHART_API_MOCK_MISSING", message: str = "no fixture"
) -> dict[str, Any]:
    return {"request": {"chartTemplateId": template}, "error": {"code": code, "message": message}}


def _manifest(
    items: list[dict[str, Any]], failures: list[dict[str, Any]], min_images: int = 1
) -> dict[str, Any]:
    requested = [{"chartTemplateId": i["chartTemplateId"]} for i in items]
    requested += [f["request"] for f in failures]
    return {
        "schemaVersion": 1,
        "runId": "run1",
        "stepId": "charts_1h",
        "createdAt": "2026-11-22T04:12:04.000Z",
        "symbol": "BTCUSDT",
        "timeframe": "1h",
        "minImages": min_images,
        "requested": requested or [{"chartTemplateId": "t"}],
        "items": items,
        "failures": failures,
    }


def _read(manifest: dict[str, Any]) -> ReadManifest:
    """The document as `view` has it once read: through the one manifest reader."""
    return manifest_of(manifest, "m.json")


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def _images_for(manifest: dict[str, Any], data: bytes) -> dict[str, ChartImage]:
    return {i["png_gcs_uri"]: ChartImage(where=i["png_gcs_uri"], data=data) for i in manifest["items"]}


# --- rendering


def test_every_item_is_shown_with_its_facts_and_embedded_png() -> None:
    png = FIXTURE_PNG.read_bytes()
    manifest = _manifest([_item("price_v1", meta={"chartImgSymbol": "BINANCE:BTCUSDT"}), _item("rsi_v1")], [])
    page = render_page(_read(manifest), _images_for(manifest, png), source="m.json")
    parsed = _parse(page.html)
    images = [attrs for tag, attrs in parsed.tags if tag == "img"]
    assert len(images) == 2 and page.problems == ()
    for attrs in images:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == png
    text = " ".join(parsed.text)
    for expected in [
        "price_v1",
        "rsi_v1",
        "kind of rsi_v1",
        "BINANCE:BTCUSDT",
        "2026-11-22T04:12:03.123Z",
        "1h",
    ]:
        assert expected in text
    assert "SUCCEEDED" in text and "No failures" in text


def test_page_forbids_every_fetch_and_references_nothing_outside() -> None:
    manifest = _manifest([_item("price_v1")], [])
    html = render_page(_read(manifest), _images_for(manifest, FIXTURE_PNG.read_bytes()), source="m.json").html
    parsed = _parse(html)
    csp = [
        a["content"]
        for t, a in parsed.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp and "default-src 'none'" in (csp[0] or "")
    for tag, attrs in parsed.tags:
        assert tag not in {"script", "link", "iframe", "object"}
        for name in ("src", "href"):
            assert (attrs.get(name) or "data:").startswith("data:")  # nothing to fetch, offline


def test_untrusted_manifest_text_is_escaped() -> None:
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    manifest = _manifest(
        [_item("price_v1", kind=hostile, label=hostile)],
        [
            {
                "request": {"chartTemplateId": "rsi_v1"},
                "error": {
                    "code": "CHART_API_FAILED",
                    "message": hostile,
                    "details": {"provider": "</code>" + hostile},
                },
            }
        ],
    )
    state = StepState(status="FAILED", source=f"state{hostile}", error_code="X", error_message=hostile)
    page = render_page(
        _read(manifest), _images_for(manifest, FIXTURE_PNG.read_bytes()), source=hostile, state=state
    )
    parsed = _parse(page.html)
    assert not [t for t, _ in parsed.tags if t == "script"]
    assert len([t for t, _ in parsed.tags if t == "img"]) == 1  # only the chart, never the injected one
    assert "".join(parsed.text).count(hostile) >= 4  # shown as text: kind, label, message, source


def test_missing_or_non_png_image_gets_a_placeholder_and_a_problem() -> None:
    manifest = _manifest([_item("gone_v1"), _item("text_v1"), _item("ok_v1")], [])
    uris = [i["png_gcs_uri"] for i in manifest["items"]]
    images = {
        uris[0]: ChartImage(where="/x/gone.png", problem="PNG missing: not found at /x/gone.png"),
        uris[1]: ChartImage(where="/x/text.png", data=FIXTURE_PNG.read_bytes()[:40]),  # cut short
        uris[2]: ChartImage(where="/x/ok.png", data=FIXTURE_PNG.read_bytes()),
    }
    page = render_page(_read(manifest), images, source="m.json")
    assert len(page.problems) == 2
    assert "gone_v1" in page.problems[0] and "not found at /x/gone.png" in page.problems[0]
    assert "text_v1" in page.problems[1] and "/x/text.png is not a whole PNG (40 bytes: " in page.problems[1]
    parsed = _parse(page.html)
    assert len([t for t, _ in parsed.tags if t == "img"]) == 1
    assert len([a for t, a in parsed.tags if "placeholder" in (a.get("class") or "")]) == 2
    assert "Problems" in parsed.text


def test_a_request_neither_rendered_nor_failed_is_a_problem() -> None:
    manifest = _manifest([_item("a_v1")], [])
    manifest["requested"].append({"chartTemplateId": "lost_v1"})
    page = render_page(_read(manifest), _images_for(manifest, FIXTURE_PNG.read_bytes()), source="m.json")
    assert page.problems == ("lost_v1: requested, but neither in items nor in failures",)


@pytest.mark.parametrize(
    ("items", "min_images", "status"), [(1, 2, "FAILED"), (2, 2, "SUCCEEDED"), (0, 0, "SUCCEEDED")]
)
def test_status_follows_the_success_rule(items: int, min_images: int, status: str) -> None:
    manifest = _manifest([_item(f"t{n}_v1") for n in range(items)], [_failure("f_v1")], min_images)
    html = render_page(_read(manifest), _images_for(manifest, FIXTURE_PNG.read_bytes()), source="m.json").html
    assert f'id="step-status">{status}<' in html
    assert f'id="stat-min-images">{min_images}<' in html


def test_the_state_file_status_wins_and_a_disagreement_is_noted() -> None:
    manifest = _manifest([_item("a_v1"), _item("b_v1")], [], min_images=1)
    state = StepState(
        status="FAILED",
        source="flow_runs/run1.json",
        error_code="MANIFEST_WRITE_FAILED",
        error_message="boom",
    )
    html = render_page(
        _read(manifest), _images_for(manifest, FIXTURE_PNG.read_bytes()), source="m", state=state
    ).html
    assert 'id="step-status">FAILED<' in html
    # the note as the page reads (jinja2 spells an escaped quote &#39;, html.escape &#x27;)
    text = " ".join(_parse(html).text)
    assert "the manifest's rule gives SUCCEEDED" in text and "MANIFEST_WRITE_FAILED" in text


def test_failures_table_lists_code_message_and_details() -> None:
    failure = _failure("x_v1", "CHART_API_LIMIT_EXCEEDED", "all accounts exhausted")
    failure["error"]["details"] = {"accountsTried": 3}
    manifest = _manifest([], [failure, _failure("y_v1")])
    parsed = _parse(render_page(_read(manifest), {}, source="m.json").html)
    text = " ".join(parsed.text)
    assert "CHART_API_LIMIT_EXCEEDED" in text and "CHART_API_MOCK_MISSING" in text
    assert "all accounts exhausted" in text and '{"accountsTried": 3}' in text
    assert "No images were produced." in text


# --- parsing


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "a manifest is a JSON object, found an array"),
        (json.dumps({**_manifest([], []), "minImages": -1}).encode(), "$.minImages"),
        (json.dumps({**_manifest([], []), "runId": "../etc"}).encode(), "$.runId"),
        (
            json.dumps({k: v for k, v in _manifest([], []).items() if k != "items"}).encode(),
            "'items' is a required",
        ),
        (json.dumps({**_manifest([], []), "schemaVersion": 2}).encode(), "$.schemaVersion: format version 2"),
        (json.dumps(_manifest([_item("a_v1")], [])).encode()[:-40], "a file cut short?"),
    ],
)
def test_a_bad_manifest_is_refused_naming_the_problem(raw: bytes, expected: str) -> None:
    with pytest.raises(ViewInputError) as info:
        parse_manifest(raw, "m.json")
    assert str(info.value).startswith("m.json: ") and expected in str(info.value)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"runId": "other", "steps": {}}, "is run 'other', the manifest is run 'run1'"),
        ({"runId": "run1", "steps": {}}, "has no step 'charts_1h'"),
        ({"runId": "run1", "steps": {"charts_1h": {"status": "DONE"}}}, "'DONE' is not a step status"),
        ({"runId": "run1"}, "not a flow_run"),
    ],
)
def test_a_bad_state_file_is_refused_naming_the_problem(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(ViewInputError) as info:
        parse_state(json.dumps(document).encode(), "s.json", "run1", "charts_1h")
    assert expected in str(info.value)


def test_state_file_gives_status_and_error() -> None:
    step = {"status": "FAILED", "error": {"code": "CHART_API_FAILED", "message": "1 of 3"}}
    state = parse_state(
        json.dumps({"runId": "run1", "steps": {"charts_1h": step}}).encode(), "s", "run1", "charts_1h"
    )
    assert (state.status, state.error_code, state.error_message) == ("FAILED", "CHART_API_FAILED", "1 of 3")


# --- reading a local bucket mirror


def _mirror(root: Path, manifest: dict[str, Any], png: bytes | None) -> Path:
    """Writes run-local's layout: <root>/gcs/<bucket>/charts/<runId>/<stepId>/manifest.json (+ PNGs)."""
    step_dir = root / "gcs" / BUCKET / "charts" / "run1" / "charts_1h"
    step_dir.mkdir(parents=True)
    (step_dir / "manifest.json").write_text(json.dumps(manifest))
    if png is not None:
        for item in manifest["items"]:
            (step_dir / item["png_gcs_uri"].rsplit("/", 1)[1]).write_bytes(png)
    return step_dir


def test_output_folder_step_folder_and_file_all_find_the_manifest(tmp_path: Path) -> None:
    manifest = _manifest([_item("a_v1")], [])
    step_dir = _mirror(tmp_path, manifest, FIXTURE_PNG.read_bytes())
    for given in (tmp_path, step_dir, step_dir / "manifest.json"):
        run = load_local(given)
        assert run.manifest == _read(manifest) and run.local_dir == step_dir
        assert [i.data for i in run.images.values()] == [FIXTURE_PNG.read_bytes()]


def test_pngs_beside_a_copied_manifest_are_found(tmp_path: Path) -> None:
    manifest = _manifest([_item("a_v1")], [])
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / manifest["items"][0]["png_gcs_uri"].rsplit("/", 1)[1]).write_bytes(b"\x89PNG\r\n\x1a\nrest")
    assert [i.data for i in load_local(tmp_path).images.values()] == [b"\x89PNG\r\n\x1a\nrest"]


def test_an_object_name_with_dot_dot_is_never_read(tmp_path: Path) -> None:
    (tmp_path / "secret.png").write_bytes(b"\x89PNG\r\n\x1a\nsecret")
    manifest = _manifest([_item("a_v1", png_gcs_uri=f"gs://{BUCKET}/charts/../../secret.png")], [])
    step_dir = _mirror(tmp_path / "out", manifest, None)
    image = next(iter(load_local(step_dir).images.values()))
    assert image.data is None and "unsafe object name" in (image.problem or "")


def test_several_manifests_below_a_folder_must_be_named(tmp_path: Path) -> None:
    _mirror(tmp_path / "a", _manifest([], [_failure("x_v1")]), None)
    _mirror(tmp_path / "b", _manifest([], [_failure("x_v1")]), None)
    with pytest.raises(ViewInputError, match="2 manifests below this folder, name one"):
        load_local(tmp_path)


@pytest.mark.parametrize("local", [True, False], ids=["local", "gs"])
def test_the_page_goes_under_out_view_whatever_the_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    where = tmp_path / "mirror" if local else None  # never beside a manifest read from disk
    run = LoadedRun(_read(_manifest([], [_failure("x_v1")])), {}, "gs://b/m.json", where)
    assert default_page_path(run) == Path("out/view/chart-view-run1-charts_1h.html")


# --- the CLI: `worker-chart-export view`


def _run(argv: list[str]) -> int:
    return main(["view", *argv])


def test_run_view_writes_under_out_view_and_reports_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    step_dir = _mirror(tmp_path / "out" / "demo", _manifest([_item("a_v1")], [], min_images=1), None)
    before = sorted(step_dir.iterdir())
    assert _run(["out/demo"]) == EXIT_OK  # as the README writes it, relative to the current folder
    out, err = capsys.readouterr()
    page = tmp_path / "out" / "view" / "chart-view-run1-charts_1h.html"
    assert page.is_file() and page.as_uri() in out and out.startswith("SUCCEEDED")
    assert "worker-chart-export view: problem: a_v1: PNG missing: not found at" in err  # PNG missing
    assert "Image unavailable" in page.read_text()
    assert sorted(step_dir.iterdir()) == before  # nothing written into the bucket mirror


def test_run_view_honours_output_and_the_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step_dir = _mirror(tmp_path, _manifest([_item("a_v1")], []), FIXTURE_PNG.read_bytes())
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"runId": "run1", "steps": {"charts_1h": {"status": "RUNNING"}}}))
    out_page = tmp_path / "pages" / "p.html"
    assert _run([str(step_dir), "--output", str(out_page), "--flow-run-state", str(state)]) == EXIT_OK
    assert 'id="step-status">RUNNING<' in out_page.read_text()
    assert "RUNNING: page written to" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "invalid", "bad-state"])
def test_run_view_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.chdir(tmp_path)
    manifest = _manifest([], [_failure("x_v1")])
    if case == "invalid":
        manifest["timeframe"] = "7h"
    step_dir = _mirror(tmp_path, manifest, None)
    argv = {
        "missing": [str(tmp_path / "nope")],
        "invalid": [str(step_dir)],
        "bad-state": [str(step_dir), "--flow-run-state", str(tmp_path / "absent.json")],
    }[case]
    assert _run(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    expected = {
        "missing": "nope: no such file or folder",
        "invalid": "$.timeframe",
        "bad-state": "absent.json",
    }[case]
    [line] = err.splitlines()
    assert line.startswith("worker-chart-export view: error: ") and expected in line
    assert not list(tmp_path.rglob("*.html"))


def test_view_manifest_returns_what_it_wrote(tmp_path: Path) -> None:
    step_dir = _mirror(
        tmp_path, _manifest([_item("a_v1")], [_failure("b_v1")], min_images=2), FIXTURE_PNG.read_bytes()
    )
    result = view_manifest(step_dir / "manifest.json", out=tmp_path / "v.html")
    assert result.page_path == tmp_path / "v.html" and result.status == "FAILED" and result.problems == ()
    assert result.source == str(step_dir / "manifest.json")


# --- no key on the page


def test_the_page_and_the_command_carry_no_form_of_a_configured_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest written by an older worker (or a state file) that holds a key: `view`, with
    the key configured, shows none of its forms on the page or in what it prints."""
    from harness.secret_scan import key_forms, leaks
    from worker_chart_export.cli.main import main

    key = 'vw/"key\\with+odd%chars=0123456789abcdef'
    forms = list(key_forms(key).values())
    failures = [_failure(f"t{i}_v1", message=f"CHART-IMG said {form}") for i, form in enumerate(forms)]
    failures[0]["error"]["details"] = {"message": forms[1], forms[2]: forms[3]}
    failures[1]["request"]["note"] = forms[5]  # a request's own fields are copied as they are
    # every text of an item, typed or kept as written (meta), once the reader has read it
    item = _item("a_v1", kind=f"kind {forms[6]}", label=forms[7], meta={"chartImgSymbol": forms[8]})
    step_dir = _mirror(tmp_path, _manifest([item], failures), FIXTURE_PNG.read_bytes())
    state = tmp_path / "state.json"
    step = {"status": "FAILED", "error": {"code": "CHART_API_FAILED", "message": forms[4]}}
    state.write_text(json.dumps({"runId": "run1", "steps": {"charts_1h": step}}))
    monkeypatch.setenv("CHART_IMG_ACCOUNTS_JSON", json.dumps([{"id": "acc1", "apiKey": key}]))
    page = tmp_path / "page.html"
    assert main(["view", str(step_dir), "--out", str(page), "--flow-run-state", str(state)]) == EXIT_OK
    out, err = capsys.readouterr()
    html = page.read_text()
    assert html.count("&lt;redacted&gt;") >= len(forms)
    assert "CHART-IMG said" in html and 'id="step-status">FAILED<' in html
    assert leaks([html, out, err], [key]) == []
