"""Issue 25, item 1: a retried step reuses a PNG only for the very request it would send now,
on fake-gcs-server with the CHART-IMG stand-in (real HTTP, real mode).

A first execution renders the step's three charts into the bucket (each PNG stamped with the
digest of the body sent and the claim token that wrote it); the step is then made READY again,
as the reaper does after a crash, and something changes before the retry: a template is
edited, the run's symbol becomes another whose slug collides with the first, or an object is
planted under a PNG's name. The retry pays CHART-IMG (the stand-in's request log) exactly for
the charts whose request changed, reuses the others, and names each skipped object in one
WARNING.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.cloud import storage
from pydantic import SecretStr

from harness.builders import TEMPLATES_DIR, chart_step, chart_step_for, flow_run
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.gcs_emulator import object_metadata
from harness.logs import LogCapture
from harness.naming_contract import png_name
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.gcs import GcsArtifactStore
from worker_chart_export.adapters.local import LocalTemplateSource
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.settings import Settings
from worker_chart_export.testing import FakeClock, InMemoryUsageStore
from worker_chart_export.testing.flow_runs import InMemoryFlowRuns

pytestmark = pytest.mark.emulators

LIMITS = StepLimits.within_request(request_timeout_seconds=120.0, finalize_budget_seconds=5)
TEMPLATES = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]  # three
EDITED = TEMPLATES[0]
SKIPPED_LINE = "earlier charts not reused: rendering them anew"


@dataclass
class Retry:
    runs: InMemoryFlowRuns
    server: ChartImgServer
    templates_dir: Path
    storage: storage.Client
    bucket: str
    logs: LogCapture

    def execute(self) -> dict[str, Any]:
        settings = Settings(
            charts_api_mode="real",
            chart_img_base_url=self.server.base_url,
            chart_img_accounts_json=SecretStr(
                json.dumps([{"id": "acc1", "apiKey": self.server.keys[0], "ratePerSecond": 50, "burst": 10}])
            ),
            chart_img_request_timeout_seconds=10.0,
        )
        ports = Ports(
            flow_runs=self.runs,
            templates=LocalTemplateSource(self.templates_dir),
            artifacts=GcsArtifactStore(self.storage, self.bucket, clock=FakeClock()),
            chart_api=build_chart_api(settings, InMemoryUsageStore(), seams=Seams(clock=SYSTEM_CLOCK)),
        )
        report = execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=SYSTEM_CLOCK)
        assert report.outcome == "SUCCEEDED", report
        return self.step()

    def step(self) -> dict[str, Any]:
        step: dict[str, Any] = self.runs.runs["run1"]["steps"]["charts"]
        return step

    def made_ready_again(self) -> None:
        """As the reaper leaves a step whose execution died: READY, its attempt kept."""
        step = self.step()
        for field in ("claimToken", "leaseExpiresAt", "finishedAt", "startedAt"):
            step.pop(field, None)
        step["status"] = "READY"

    def manifest(self) -> dict[str, Any]:
        blob = self.storage.bucket(self.bucket).blob("charts/run1/charts/manifest.json")
        manifest: dict[str, Any] = json.loads(blob.download_as_bytes())
        return manifest

    def items(self) -> dict[str, dict[str, Any]]:
        return {item["chartTemplateId"]: item for item in self.manifest()["items"]}

    def calls(self) -> list[tuple[str | None, str | None]]:
        return [(r.template, r.symbol) for r in self.server.requests]

    def received_digests(self) -> dict[str | None, str | None]:
        """The requestDigest of each template's body as the stand-in received it."""
        return {r.template: r.received_digest for r in self.server.requests}

    def edit_template(self, template_id: str, **request: Any) -> dict[str, Any]:
        path = self.templates_dir / f"{template_id}.json"
        template = json.loads(path.read_text())
        template["request"] = request
        path.write_text(json.dumps(template))
        # the stand-in names the new body apart from the old one
        self.server.register_template(f"{template_id}@edited", {"timezone": "Etc/UTC", **request})
        return template


@pytest.fixture
def retry(
    gcs_bucket: tuple[storage.Client, str],
    chart_img_server: ChartImgServer,
    log_capture: LogCapture,
    tmp_path: Path,
) -> Iterator[Retry]:
    chart_img_server.add_account("acc1")
    templates_dir = tmp_path / "chart-templates"
    shutil.copytree(TEMPLATES_DIR, templates_dir)
    register_templates_from(chart_img_server, templates_dir)
    client, bucket = gcs_bucket
    yield Retry(InMemoryFlowRuns(), chart_img_server, templates_dir, client, bucket, log_capture)


def start(retry: Retry, step: dict[str, Any], symbol: str = "BTCUSDT") -> None:
    retry.runs.runs["run1"] = copy.deepcopy(flow_run({"charts": step}, symbol=symbol))


def test_every_png_carries_the_digest_of_the_body_sent_and_the_claim_that_wrote_it(retry: Retry) -> None:
    start(retry, chart_step())
    step = retry.execute()

    received = retry.received_digests()
    assert sorted(received, key=str) == sorted(TEMPLATES)
    for template_id, item in retry.items().items():
        digest = received[template_id]
        path = item["png_gcs_uri"].removeprefix(f"gs://{retry.bucket}/")
        stamped = object_metadata(retry.storage, retry.bucket, path)
        assert stamped["contentType"] == "image/png"
        assert stamped["metadata"] == {"requestDigest": digest, "claimToken": step["claimToken"]}
        assert item["meta"]["requestDigest"] == digest


def test_a_template_edited_before_the_retry_is_rendered_anew_the_others_reused(retry: Retry) -> None:
    start(retry, chart_step())
    retry.execute()
    first = retry.items()
    assert sorted(t for t, _ in retry.calls()) == sorted(TEMPLATES)
    retry.made_ready_again()
    retry.edit_template(EDITED, width=640, height=480, theme="light", studies=[{"name": "Volume"}])

    retry.execute()

    assert retry.calls()[3:] == [(f"{EDITED}@edited", "BINANCE:BTCUSDT")]  # one call, the new body
    items = retry.items()
    for template_id in TEMPLATES[1:]:
        assert items[template_id]["png_gcs_uri"] == first[template_id]["png_gcs_uri"]
        assert items[template_id]["meta"]["reused"] is True
    assert items[EDITED]["png_gcs_uri"] != first[EDITED]["png_gcs_uri"]
    assert "reused" not in items[EDITED]["meta"]
    (warning,) = retry.logs.events(SKIPPED_LINE)
    assert warning["skipped"] == [
        {
            "chartTemplateId": EDITED,
            "gcsUri": first[EDITED]["png_gcs_uri"],
            "reason": "it was rendered from another request body",
        }
    ]


def test_a_symbol_whose_slug_collides_is_never_served_the_other_symbols_png(retry: Retry) -> None:
    """`BINANCE:US_BTCUSD` and `BINANCE_US:BTCUSD` both name their PNGs BINANCE-US-BTCUSD.
    scope.symbol is a base symbol (BTCUSD): the exchange moves in the template between runs."""
    template = json.loads((retry.templates_dir / f"{EDITED}.json").read_text())
    template |= {"id": "pair_v1", "chartImgSymbolTemplate": "BINANCE:US_{symbol}"}
    (retry.templates_dir / "pair_v1.json").write_text(json.dumps(template))
    retry.server.register_template("pair_v1", {"timezone": "Etc/UTC", **template["request"]})
    start(retry, chart_step_for(["pair_v1"]), symbol="BTCUSD")
    retry.execute()
    before = retry.items()["pair_v1"]["png_gcs_uri"]
    retry.made_ready_again()
    template["chartImgSymbolTemplate"] = "BINANCE_US:{symbol}"
    (retry.templates_dir / "pair_v1.json").write_text(json.dumps(template))

    retry.execute()

    assert retry.calls() == [("pair_v1", "BINANCE:US_BTCUSD"), ("pair_v1", "BINANCE_US:BTCUSD")]
    item = retry.items()["pair_v1"]
    assert item["meta"]["chartImgSymbol"] == "BINANCE_US:BTCUSD" and "reused" not in item["meta"]
    assert (
        item["png_gcs_uri"] != before
        and "BINANCE-US-BTCUSD" in before
        and "BINANCE-US-BTCUSD" in item["png_gcs_uri"]
    )
    (warning,) = retry.logs.events(SKIPPED_LINE)
    assert [s["gcsUri"] for s in warning["skipped"]] == [before]


@pytest.mark.parametrize(
    ("content_type", "data", "reason"),
    [
        ("text/html", b"<html><body>not a chart</body></html>", "its content type is not image/png"),
        (
            "image/png",
            b"<html><body>not a chart</body></html>",
            "its bytes are not a whole PNG",
        ),
    ],
    ids=["text-html", "png-type-html-bytes"],
)
def test_an_object_planted_under_a_pngs_name_is_never_served_as_the_chart(
    retry: Retry, content_type: str, data: bytes, reason: str
) -> None:
    """Planted after the first execution, newer than its PNG, under the name the worker would
    give it and even with the right digest copied into its metadata."""
    start(retry, chart_step())
    retry.execute()
    first = retry.items()
    retry.made_ready_again()
    digest = retry.received_digests()[EDITED]  # of the body the retry sends again
    path = png_name("run1", "charts", SYSTEM_CLOCK.now(), "BINANCE-BTCUSDT", "1h", EDITED)
    blob = retry.storage.bucket(retry.bucket).blob(path)
    blob.metadata = {"requestDigest": digest, "claimToken": "planted"}
    blob.upload_from_string(data, content_type=content_type)

    retry.execute()

    assert retry.calls()[3:] == []  # the older, genuine PNG stands for the chart
    items = retry.items()
    assert items[EDITED]["png_gcs_uri"] == first[EDITED]["png_gcs_uri"]
    assert all(items[t]["meta"]["reused"] is True for t in TEMPLATES)
    (warning,) = retry.logs.events(SKIPPED_LINE)
    assert warning["skipped"] == [
        {"chartTemplateId": EDITED, "gcsUri": f"gs://{retry.bucket}/{path}", "reason": reason}
    ]


def test_a_planted_object_and_no_genuine_png_means_the_chart_is_rendered(retry: Retry) -> None:
    start(retry, chart_step(attempt=1))
    path = png_name("run1", "charts", SYSTEM_CLOCK.now(), "BINANCE-BTCUSDT", "1h", EDITED)
    blob = retry.storage.bucket(retry.bucket).blob(path)
    blob.upload_from_string(b"<html>maintenance</html>", content_type="text/html")

    retry.execute()

    assert sorted(t for t, _ in retry.calls()) == sorted(TEMPLATES)
    assert retry.items()[EDITED]["png_gcs_uri"] != f"gs://{retry.bucket}/{path}"
    (warning,) = retry.logs.events(SKIPPED_LINE)
    assert warning["skipped"][0]["reason"] == "its content type is not image/png"
