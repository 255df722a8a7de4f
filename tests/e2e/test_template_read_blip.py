"""A Firestore outage that fails the step's template read is not terminal (issue 25 item 5's
gap; docs/design.md, "A transient store error is never terminal"): the served worker in real
mode, its Firestore reached through tests/harness/firestore_fault_proxy.py, which answers
UNAVAILABLE to every read of `chart_templates` (and only those: the claim, the fence and the
finalize go through) until healed, longer than the worker's own retries of the read.

The event, a real protobuf CloudEvent of the flow_run's version as Eventarc delivers it, is
answered 500 with the step still READY: nothing claimed, no lease, no attempt, no CHART-IMG
call. The same event delivered again once the store is back runs the step: SUCCEEDED on its
first attempt. Judged by the proxy's count of refused reads, the HTTP answers, Firestore, the
stand-in's request log and the worker's log lines.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib import error, request

import pytest
from google.cloud import firestore

from e2e.stack import Worker, start_worker, worker_command
from harness.builders import TEMPLATES_DIR, chart_step, flow_run, load_templates
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.firestore_emulator import FirestoreEmulator, free_port
from harness.firestore_fault_proxy import FirestoreFaultProxy
from harness.gcs_emulator import GcsEmulator, storage_client_for
from worker_chart_export.testing import binary_update_event

pytestmark = pytest.mark.emulators

STEP = "charts"


@dataclass
class Served:
    worker: Worker
    proxy: FirestoreFaultProxy
    chart_img: ChartImgServer
    db: firestore.Client

    def deliver(self, event: tuple[bytes, dict[str, str]]) -> int:
        """The event POSTed as Eventarc delivers it; the worker's HTTP status."""
        body, headers = event
        try:
            with request.urlopen(request.Request(self.worker.base_url + "/", data=body, headers=headers)):
                return 200
        except error.HTTPError as answer:
            return answer.code

    def step(self, run_id: str) -> dict[str, Any]:
        step: dict[str, Any] = (self.db.collection("flow_runs").document(run_id).get().to_dict() or {})[
            "steps"
        ][STEP]
        return step

    def lines(self, run_id: str) -> list[dict[str, Any]]:
        return [line for line in self.worker.log_lines() if line.get("runId") == run_id]


@pytest.fixture
def served(
    firestore_emulator: FirestoreEmulator,
    firestore_client: firestore.Client,
    gcs_emulator: GcsEmulator,
    tmp_path: Path,
) -> Iterator[Served]:
    for template_id, template in load_templates().items():
        firestore_client.collection("chart_templates").document(template_id).set(template)
    chart_img = ChartImgServer().start()
    register_templates_from(chart_img, TEMPLATES_DIR)
    key = chart_img.add_account("acct1")
    bucket = f"blip-{uuid.uuid4().hex[:12]}"
    storage_client_for(gcs_emulator.url).create_bucket(bucket)
    proxy = FirestoreFaultProxy(firestore_emulator).start()
    worker: Worker | None = None
    try:
        worker = start_worker(
            free_port(),
            {
                "FIRESTORE_EMULATOR_HOST": proxy.host,  # the worker's Firestore: through the proxy
                "GOOGLE_CLOUD_PROJECT": firestore_emulator.project,
                "STORAGE_EMULATOR_HOST": gcs_emulator.url,
                "CHARTS_BUCKET": bucket,
                "CHARTS_API_MODE": "real",
                "CHART_IMG_BASE_URL": chart_img.base_url,
                "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": key}]),
                "APP_ENV": "e2e",
            },
            tmp_path / "worker.log",
            command=[worker_command(0)[0], "serve"],
        )
        yield Served(worker, proxy, chart_img, firestore_client)
    finally:
        if worker is not None:
            worker.stop()
        proxy.stop()
        chart_img.stop()


def test_a_template_read_outage_redelivers_the_event_and_the_step_then_succeeds(served: Served) -> None:
    run_id = f"blip_{uuid.uuid4().hex[:10]}"
    document = flow_run({STEP: chart_step()}, run_id=run_id, symbol="LTCUSDT")
    written = served.db.collection("flow_runs").document(run_id)
    written.set(document)
    event = binary_update_event(
        served.db.project,
        run_id,
        document,
        f"evt-{uuid.uuid4().hex[:8]}",
        update_time=written.get().update_time,
    )
    outage = served.proxy.fail("BatchGetDocuments", b"/chart_templates/")

    first = served.deliver(event)

    assert first == 500, served.worker.log_tail()
    assert outage.refused >= 1  # the worker's retries met the outage, every one of them
    step = served.step(run_id)
    assert step == chart_step(), step  # READY, untouched: no claim, no attempt
    leases = [lease.to_dict() or {} for lease in served.db.collection("step_leases").stream()]
    assert not [lease for lease in leases if lease.get("runId") == run_id]
    assert served.chart_img.requests == []  # nothing paid for
    (line,) = [line for line in served.lines(run_id) if line["severity"] == "ERROR"]
    assert line["errorType"] == "RedeliverEvent", line
    assert "chart templates could not be read before its claim" in line["reason"], line

    served.proxy.heal()
    again = served.deliver(event)  # Eventarc's redelivery: the same event

    assert again == 200, served.worker.log_tail()
    step = served.step(run_id)
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 1), step.get("error")
    assert len(served.chart_img.requests) == 3
