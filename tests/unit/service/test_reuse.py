"""A retried step lists what an earlier execution of it wrote and pays CHART-IMG only for
the rest (service/reuse.py), on the local adapters: one listing, n - k calls, the manifest
listing the reused PNGs with their own URI and generatedAt; and only for the very request:
a PNG rendered from another body, or not a PNG at all, is named once and rendered anew."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.builders import REPO, chart_step, flow_run
from harness.chart_img_server import PNG
from harness.logs import LogCapture, picked
from harness.naming_contract import png_name, request_sha256
from worker_chart_export.adapters.fixtures import FixtureLibrary, MockChartApi
from worker_chart_export.adapters.local import LocalArtifactStore, LocalFlowRunStore, LocalTemplateSource
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.exceptions import ArtifactListError, ArtifactReadError
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.core.types import ChartCall, ChartResult, ListedObject
from worker_chart_export.service.execute import StepReport, execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.testing import FakeClock

LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=2)
TEMPLATES = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]  # three


def sent_body(template: str, **changes: Any) -> dict[str, Any]:
    """The body this step sends for `template`, with `changes`, as docs/contract.md composes it
    (13.3, 14.2): the template's request, its timezone (Etc/UTC unless it names one), the
    chartImgSymbol and the step's timeframe."""
    stored = json.loads((REPO / "chart-templates" / f"{template}.json").read_text())
    market = {"symbol": "BINANCE:BTCUSDT", "interval": "1h"}
    return {"timezone": "Etc/UTC", **stored["request"], **changes, **market}


class CountingChartApi:
    """The mock CHART-IMG, counting the calls and the chart sessions opened (`rendered` in
    the order the charts' threads reached it: compare it sorted)."""

    mode = "mock"

    def __init__(self) -> None:
        self.inner = MockChartApi(FixtureLibrary(REPO / "fixtures" / "chart-api"))
        self.rendered: list[str] = []  # in the order the step's threads got to them
        self.bodies: dict[str, Mapping[str, Any]] = {}  # what each chart was asked with
        self.sessions = 0

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[Any]:
        self.sessions += 1
        yield self

    def render(self, call: ChartCall) -> ChartResult:
        self.rendered.append(call.chart_template_id)
        self.bodies[call.chart_template_id] = call.body
        return self.inner.render(call)


class ListingArtifacts:
    """The local bucket, counting listings and reads (or refusing them)."""

    def __init__(self, inner: LocalArtifactStore, *, refuse: bool = False) -> None:
        self.inner, self.refuse, self.bucket = inner, refuse, inner.bucket
        self.listings: list[tuple[str, str]] = []
        self.reads: list[str] = []
        self.read_sizes: list[int] = []
        self.unreadable: set[str] = set()

    def check_bucket(self) -> None:
        self.inner.check_bucket()

    def create_png(self, object_path: str, data: bytes, *, metadata: Mapping[str, str]) -> str:
        return self.inner.create_png(object_path, data, metadata=metadata)

    def list_objects(self, prefix: str, *, start_offset: str = "") -> list[ListedObject]:
        self.listings.append((prefix, start_offset))
        if self.refuse:
            raise ArtifactListError(f"listing gs://bkt/{prefix} failed after 4 attempts: HTTP 503")
        return self.inner.list_objects(prefix, start_offset=start_offset)

    def read_head(self, object_path: str, size: int) -> bytes:
        self.reads.append(object_path)
        self.read_sizes.append(size)
        if object_path in self.unreadable:
            raise ArtifactReadError(f"reading gs://bkt/{object_path} failed after 3 attempts: HTTP 503")
        return self.inner.read_head(object_path, size)

    def put_manifest(self, object_path: str, data: bytes, **fence: Any) -> str:
        return self.inner.put_manifest(object_path, data, **fence)


@dataclasses.dataclass
class Retry:
    tmp: Path
    store: LocalFlowRunStore
    local: LocalArtifactStore
    artifacts: ListingArtifacts
    charts: CountingChartApi
    clock: FakeClock

    def earlier_png(
        self, template: str, seconds_ago: float, *, body: dict[str, Any] | None = None, data: bytes = PNG
    ) -> str:
        """A PNG the dead execution wrote, as it named and stamped it: rendered from `body`
        (by default the one this step sends for `template`)."""
        moment = self.clock.now() - timedelta(seconds=seconds_ago)
        path = png_name("run1", "charts", moment, "BINANCE-BTCUSDT", "1h", template)
        digest = request_sha256(body if body is not None else sent_body(template))
        stamped = {"requestDigest": digest, "claimToken": "dead-token"}
        return self.local.create_png(path, data, metadata=stamped)

    def run(self, limits: StepLimits = LIMITS) -> StepReport:
        ports = Ports(self.store, LocalTemplateSource(REPO / "chart-templates"), self.artifacts, self.charts)
        return execute_step("run1", "charts", ports=ports, limits=limits, clock=self.clock)

    def manifest(self) -> dict[str, Any]:
        path = self.tmp / "gcs" / "bkt" / "charts" / "run1" / "charts" / "manifest.json"
        manifest: dict[str, Any] = json.loads(path.read_text())
        return manifest


def retry_of(tmp_path: Path, *, attempt: int = 1, refuse_listing: bool = False, **step: Any) -> Retry:
    """A step the reaper made READY again after `attempt` executions (the next claim is attempt + 1)."""
    source = tmp_path / "flow_run.json"
    source.write_text(json.dumps(flow_run({"charts": chart_step(attempt=attempt, **step)})))
    local = LocalArtifactStore(tmp_path / "gcs", "bkt")
    store = LocalFlowRunStore(source, tmp_path / "state.json")
    return Retry(
        tmp_path,
        store,
        local,
        ListingArtifacts(local, refuse=refuse_listing),
        CountingChartApi(),
        FakeClock(),
    )


def test_a_retry_renders_only_the_charts_the_dead_execution_did_not_write(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    retry = retry_of(tmp_path)
    earlier = {t: retry.earlier_png(t, seconds_ago=120) for t in TEMPLATES[:2]}  # k = 2 of n = 3

    report = retry.run()

    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    assert sorted(retry.charts.rendered) == sorted(TEMPLATES[2:])  # n - k calls
    assert len(retry.artifacts.listings) == 1  # one listing of the step's folder
    # each PNG reused read whole (at most 32 MiB), to be checked as a fresh answer is
    assert retry.artifacts.read_sizes == [32 * 1024 * 1024] * 2
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    for template, uri in earlier.items():
        assert items[template]["png_gcs_uri"] == uri and items[template]["meta"]["reused"] is True
        assert items[template]["generatedAt"] == "2026-11-22T09:58:00.000Z"
    assert "reused" not in items[TEMPLATES[2]]["meta"]
    reused = log_capture.events("chart reused")
    assert sorted(line["chartTemplateId"] for line in reused) == sorted(earlier)
    assert {line["ageSeconds"] for line in reused} == {120.0}


def test_a_retry_that_finds_every_chart_opens_no_chart_session(tmp_path: Path) -> None:
    retry = retry_of(tmp_path, attempt=2)
    for template in TEMPLATES:
        retry.earlier_png(template, seconds_ago=5)
    report = retry.run()
    assert report.outcome == "SUCCEEDED" and report.items_count == 3
    assert retry.charts.rendered == [] and retry.charts.sessions == 0  # no quota reserved


def test_a_first_attempt_does_not_list(tmp_path: Path) -> None:
    retry = retry_of(tmp_path, attempt=0)  # the claim makes it attempt 1
    retry.earlier_png(TEMPLATES[0], seconds_ago=5)  # not an earlier execution's: none can exist
    assert retry.run().outcome == "SUCCEEDED"
    assert retry.artifacts.listings == [] and sorted(retry.charts.rendered) == sorted(TEMPLATES)


def test_pngs_older_than_the_window_are_rendered_again(tmp_path: Path) -> None:
    retry = retry_of(tmp_path)
    retry.earlier_png(TEMPLATES[0], seconds_ago=LIMITS.chart_reuse_max_age_seconds + 1)
    retry.earlier_png(TEMPLATES[1], seconds_ago=LIMITS.chart_reuse_max_age_seconds)
    assert retry.run().outcome == "SUCCEEDED"
    assert sorted(retry.charts.rendered) == sorted([TEMPLATES[0], TEMPLATES[2]])


def test_reuse_turned_off_lists_nothing_and_renders_every_chart(tmp_path: Path) -> None:
    retry = retry_of(tmp_path)
    for template in TEMPLATES:
        retry.earlier_png(template, seconds_ago=5)
    assert retry.run(dataclasses.replace(LIMITS, chart_reuse_max_age_seconds=0)).outcome == "SUCCEEDED"
    assert retry.artifacts.listings == [] and sorted(retry.charts.rendered) == sorted(TEMPLATES)
    assert all("reused" not in item["meta"] for item in retry.manifest()["items"])


def test_a_listing_that_fails_costs_only_the_saving(tmp_path: Path, log_capture: LogCapture) -> None:
    retry = retry_of(tmp_path, refuse_listing=True)
    retry.earlier_png(TEMPLATES[0], seconds_ago=5)
    report = retry.run()
    assert report.outcome == "SUCCEEDED" and sorted(retry.charts.rendered) == sorted(TEMPLATES)
    (warning,) = log_capture.events("earlier charts not listed: rendering every chart")
    assert "HTTP 503" in warning["error"]["message"] and warning["severity"] == "WARNING"


def test_a_png_of_an_edited_template_is_named_once_and_rendered_anew(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    retry = retry_of(tmp_path)
    stale = retry.earlier_png(TEMPLATES[0], 60, body=sent_body(TEMPLATES[0], theme="light", width=640))
    kept = retry.earlier_png(TEMPLATES[1], 60)

    report = retry.run()

    assert report.outcome == "SUCCEEDED" and sorted(retry.charts.rendered) == sorted(
        [TEMPLATES[0], TEMPLATES[2]]
    )
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    assert items[TEMPLATES[1]]["png_gcs_uri"] == kept and items[TEMPLATES[1]]["meta"]["reused"] is True
    assert items[TEMPLATES[0]]["png_gcs_uri"] != stale and "reused" not in items[TEMPLATES[0]]["meta"]
    (warning,) = log_capture.events("earlier charts not reused: rendering them anew")
    assert warning["severity"] == "WARNING" and warning["skippedCount"] == 1
    assert warning["skipped"] == [
        {
            "chartTemplateId": TEMPLATES[0],
            "gcsUri": stale,
            "reason": "it was rendered from another request body",
        }
    ]
    assert retry.artifacts.reads == [kept.removeprefix("gs://bkt/")]  # only what would be reused is read


@pytest.mark.parametrize(
    "data",
    [b"<html><body>not a chart</body></html>", PNG[:8], PNG[: len(PNG) // 2], PNG[:-1]],
    ids=["html", "bare-signature", "first-half", "last-byte-missing"],
)
def test_bytes_that_are_not_a_whole_png_are_never_reused_an_older_good_png_is(
    tmp_path: Path, log_capture: LogCapture, data: bytes
) -> None:
    """A PNG half-written (an instance killed mid-upload on a store without create-only), a
    bare signature, a page: each was reused before when it began with the signature."""
    retry = retry_of(tmp_path)
    good = retry.earlier_png(TEMPLATES[0], 300)
    planted = retry.earlier_png(TEMPLATES[0], 10, data=data)

    assert retry.run().outcome == "SUCCEEDED"

    assert sorted(retry.charts.rendered) == sorted(TEMPLATES[1:])
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    assert items[TEMPLATES[0]]["png_gcs_uri"] == good
    (warning,) = log_capture.events("earlier charts not reused: rendering them anew")
    assert warning["skipped"] == [
        {
            "chartTemplateId": TEMPLATES[0],
            "gcsUri": planted,
            "reason": "its bytes are not a whole PNG",
        }
    ]


def test_a_png_whose_bytes_cannot_be_read_is_rendered_anew(tmp_path: Path, log_capture: LogCapture) -> None:
    retry = retry_of(tmp_path)
    unreadable = retry.earlier_png(TEMPLATES[0], 10)
    retry.artifacts.unreadable.add(unreadable.removeprefix("gs://bkt/"))
    assert retry.run().outcome == "SUCCEEDED" and sorted(retry.charts.rendered) == sorted(TEMPLATES)
    (warning,) = log_capture.events("earlier charts not reused: rendering them anew")
    assert warning["skipped"][0]["reason"] == "its bytes could not be read"


def test_a_file_put_in_the_bucket_folder_by_other_means_is_never_reused(tmp_path: Path) -> None:
    retry = retry_of(tmp_path)
    moment = retry.clock.now() - timedelta(seconds=10)
    path = png_name("run1", "charts", moment, "BINANCE-BTCUSDT", "1h", TEMPLATES[0])
    planted = retry.local.local_path(path)
    planted.parent.mkdir(parents=True)
    planted.write_bytes(PNG)  # a real PNG's bytes, but no content type and no digest beside it
    assert retry.run().outcome == "SUCCEEDED" and sorted(retry.charts.rendered) == sorted(TEMPLATES)


def test_every_png_written_carries_the_digest_of_its_body_and_the_claim_that_wrote_it(tmp_path: Path) -> None:
    retry = retry_of(tmp_path, attempt=0)
    assert retry.run().outcome == "SUCCEEDED"
    token = retry.store.read()["steps"]["charts"]["claimToken"]
    listed = retry.local.list_objects("charts/run1/charts/")
    pngs = {o.name: o for o in listed if o.name.endswith(".png")}
    assert len(pngs) == 3
    for item in retry.manifest()["items"]:
        stored = pngs[item["png_gcs_uri"].removeprefix("gs://bkt/")]
        digest = request_sha256(retry.charts.bodies[item["chartTemplateId"]])  # of the body sent
        assert stored.content_type == "image/png"
        assert stored.metadata == {"requestDigest": digest, "claimToken": token}
        assert item["meta"]["requestDigest"] == digest


def test_a_reused_chart_is_said_in_the_log_and_in_its_item_as_the_earlier_execution_wrote_it(
    tmp_path: Path, log_capture: LogCapture
) -> None:
    """Field by field, what an operator reads of a reused chart: its "chart reused" line and
    its manifest item keep the earlier PNG's own URI and moment, and the item names the
    template's description, the chart's symbol and the digest of the body this step sends."""
    retry = retry_of(tmp_path)
    template = TEMPLATES[0]
    uri = retry.earlier_png(template, seconds_ago=120.25)  # 10:00:00 - 120.25 s = 09:57:59.750
    retry.clock.advance(0.000456)  # the retry begins a fraction of a millisecond later

    assert retry.run().outcome == "SUCCEEDED"

    [line] = log_capture.events("chart reused")
    fields = ("severity", "chartsApi", "chartTemplateId", "gcsUri", "generatedAt", "ageSeconds")
    assert picked(line, *fields) == {
        "severity": "INFO",
        "chartsApi": {"mode": "mock"},
        "chartTemplateId": template,
        "gcsUri": uri,
        "generatedAt": "2026-11-22T09:57:59.750Z",
        "ageSeconds": 120.25,  # 120.250456 s, to the millisecond
    }
    stored = json.loads((REPO / "chart-templates" / f"{template}.json").read_text())
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    assert items[template] == {
        "chartTemplateId": template,
        "kind": stored["description"],
        "generatedAt": "2026-11-22T09:57:59.750Z",
        "png_gcs_uri": uri,
        "meta": {
            "chartImgSymbol": "BINANCE:BTCUSDT",
            "requestDigest": request_sha256(sent_body(template)),
            "reused": True,
        },
    }


def test_the_one_listing_starts_at_the_oldest_moment_a_chart_may_be_reused_from(tmp_path: Path) -> None:
    """A step's folder keeps every execution's PNGs: the listing skips those too old to be
    reused (their names begin with their moment), and keeps every one young enough."""
    retry = retry_of(tmp_path)
    retry.clock.advance(0.000456)  # not on a millisecond: names are cut to one
    oldest = retry.clock.now() - timedelta(seconds=LIMITS.chart_reuse_max_age_seconds)

    assert retry.run().outcome == "SUCCEEDED"

    [(prefix, start)] = retry.artifacts.listings
    # 10:00:00.000456 less the default window's 3600 s, cut to the millisecond
    assert (prefix, start) == ("charts/run1/charts/", "charts/run1/charts/20261122T090000000Z")

    def named(moment: datetime) -> str:
        return png_name("run1", "charts", moment, "BINANCE-BTCUSDT", "1h", TEMPLATES[0])

    assert named(oldest) >= start > named(oldest - timedelta(milliseconds=1))


def test_a_first_claim_of_a_step_that_already_names_a_manifest_reuses_its_charts(tmp_path: Path) -> None:
    """A step that ran to its end once and was made READY again (its attempts not counted)
    still names its manifest: its folder is listed and what it holds is reused."""
    manifest_uri = "gs://bkt/charts/run1/charts/manifest.json"
    retry = retry_of(tmp_path, attempt=0, outputs={"outputsManifestGcsUri": manifest_uri})
    earlier = retry.earlier_png(TEMPLATES[0], seconds_ago=60)

    report = retry.run()

    assert report.outcome == "SUCCEEDED" and retry.store.read()["steps"]["charts"]["attempt"] == 1
    assert len(retry.artifacts.listings) == 1 and sorted(retry.charts.rendered) == sorted(TEMPLATES[1:])
    items = {i["chartTemplateId"]: i for i in retry.manifest()["items"]}
    assert items[TEMPLATES[0]]["png_gcs_uri"] == earlier and items[TEMPLATES[0]]["meta"]["reused"] is True
