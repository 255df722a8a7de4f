"""Issue 25, items 1, 4 and 5, through the whole stack as `stack up` runs it: the emulator's
real triggers, advance_flow, the served worker in real mode against the CHART-IMG stand-in
(in this process, so the test decides when it answers), fake-gcs-server and the reaper
schedule. Judged by Firestore, the bucket, the stand-in's request log, the router's record of
each delivery and the worker's log lines, never by a sleep.

- A worker killed after 2 of 3 PNGs, a template edited before the retry: the edited chart is
  rendered anew (its new body in the stand-in's log), the unedited one reused.
- Firestore paused (SIGSTOP of the emulator) at the manifest's fence with a 20 s request
  timeout: no FAILED step; the reaper gives it back and the retry finishes it from the PNGs
  already paid for, with no further call.
- The bucket deleted under a running instance: the next step answers 503 before any call,
  the step stays READY, and the event redelivered once the bucket is back runs it.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib import request

import pytest

from e2e.flow_stack import (
    as_delivered,
    history,
    log_tails,
    new_run_id,
    running_stack,
    step_status,
    wait_until,
)
from harness.builders import TEMPLATES_DIR, chart_step, flow_run, load_templates
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.gcs_emulator import storage_client_for
from worker_chart_export.tools.devstack import services
from worker_chart_export.tools.devstack.stack import WORKER_TARGET, LocalStack

pytestmark = pytest.mark.emulators

LEASE_SECONDS = 20.0  # REQUEST_TIMEOUT_SECONDS (<= 30: the fence reads Firestore every time)
STEP = "charts"
TEMPLATES = [r["chartTemplateId"] for r in chart_step()["inputs"]["requests"]]  # three
WORKER_TRIGGER = "chart-worker"


@dataclass
class Unlucky:
    stack: LocalStack
    chart_img: ChartImgServer

    def start_run(self, symbol: str) -> str:
        run_id = new_run_id(symbol.lower())
        self.stack.write_flow_run(flow_run({STEP: chart_step()}, run_id=run_id, symbol=symbol))
        return run_id

    def calls(self, symbol: str) -> list[str | None]:
        return [r.template for r in self.chart_img.requests if r.symbol == f"BINANCE:{symbol}"]

    def step(self, run_id: str) -> dict[str, Any]:
        step: dict[str, Any] = (self.stack.flow_run_ref(run_id).get().to_dict() or {})["steps"][STEP]
        return step

    def items(self, run_id: str) -> dict[str, dict[str, Any]]:
        manifest = json.loads(self.stack.read_object(f"charts/{run_id}/{STEP}/manifest.json"))
        return {item["chartTemplateId"]: item for item in manifest["items"]}

    def worker_lines(self, run_id: str) -> list[dict[str, Any]]:
        """The worker's JSON log lines about this run (every process it ran in)."""
        text = self.stack.functions[WORKER_TARGET].child.log_path.read_text(
            encoding="utf-8", errors="replace"
        )
        lines = []
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("runId") == run_id:
                lines.append(line)
        return lines

    def finished(self, run_id: str) -> None:
        wait_until(
            lambda: step_status(self.stack, run_id, STEP) in ("SUCCEEDED", "FAILED"),
            what=f"{run_id} finished; logs:\n{log_tails(self.stack)}",
        )

    def emulator(self) -> Any:
        (child,) = [c for c in self.stack.supervisor.children if c.name == "firestore-emulator"]
        return child


@pytest.fixture(scope="module")
def unlucky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unlucky]:
    chart_img = ChartImgServer().start()
    register_templates_from(chart_img, TEMPLATES_DIR)
    key = chart_img.add_account("acct1")
    real_mode = {
        "CHARTS_API_MODE": "real",
        "CHART_IMG_BASE_URL": chart_img.base_url,
        "CHART_IMG_ACCOUNTS_JSON": json.dumps([{"id": "acct1", "apiKey": key}]),
    }
    try:
        with running_stack(
            tmp_path_factory.mktemp("unlucky-stack"),
            request_timeout_seconds=LEASE_SECONDS,
            finalize_budget_seconds=3.0,
            extra_env=real_mode,
        ) as stack:
            yield Unlucky(stack, chart_img)
    finally:
        chart_img.stop()


def test_a_template_edited_between_a_crash_and_its_retry_is_rendered_anew(unlucky: Unlucky) -> None:
    stack, symbol = unlucky.stack, "ADAUSDT"
    edited, kept, slow = TEMPLATES
    unlucky.chart_img.script(template=slow, latency=120)
    run_id = unlucky.start_run(symbol)
    folder = f"charts/{run_id}/{STEP}/"
    wait_until(
        lambda: len(stack.objects(folder)) == 2 and slow in unlucky.calls(symbol),
        what=f"{run_id}: two PNGs written, the third chart in flight; logs:\n{log_tails(stack)}",
    )
    written = {name.rsplit("_", 1)[0].rsplit("_", 3)[-1]: name for name in stack.objects(folder)}
    stack.crash_function(WORKER_TARGET)
    assert sorted(unlucky.calls(symbol)) == sorted(TEMPLATES)

    # the edit (light 640x480 with Volume instead of dark 800x600 with PSAR and A/D)
    original = load_templates()[edited]
    template = {
        **original,
        "request": {"width": 640, "height": 480, "theme": "light", "studies": [{"name": "Volume"}]},
    }
    stack.db.collection("chart_templates").document(edited).set(template)
    unlucky.chart_img.register_template(f"{edited}@edited", {"timezone": "Etc/UTC", **template["request"]})
    unlucky.chart_img.script(template=slow)  # answers at once from now on
    stack.start_function(WORKER_TARGET)
    unlucky.finished(run_id)

    step = unlucky.step(run_id)
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 2), (step.get("error"), log_tails(stack))
    assert sorted(unlucky.calls(symbol)[3:], key=str) == sorted([f"{edited}@edited", slow])  # the edit's call
    items = unlucky.items(run_id)
    kept_png = next(name for name in written.values() if name.endswith(f"_{kept}.png"))
    edited_png = next(name for name in written.values() if name.endswith(f"_{edited}.png"))
    assert items[kept]["png_gcs_uri"] == f"gs://{stack.bucket}/{kept_png}"
    assert items[kept]["meta"]["reused"] is True
    assert items[edited]["png_gcs_uri"] != f"gs://{stack.bucket}/{edited_png}"
    assert "reused" not in items[edited]["meta"] and "reused" not in items[slow]["meta"]
    (warning,) = [
        line for line in unlucky.worker_lines(run_id) if line["message"].startswith("earlier charts not")
    ]
    assert warning["skipped"] == [
        {
            "chartTemplateId": edited,
            "gcsUri": f"gs://{stack.bucket}/{edited_png}",
            "reason": "it was rendered from another request body",
        }
    ]


def test_a_firestore_pause_at_the_manifest_fence_never_fails_the_paid_step(unlucky: Unlucky) -> None:
    stack, symbol = unlucky.stack, "XRPUSDT"
    answer = threading.Event()
    unlucky.chart_img.script(symbol=f"BINANCE:{symbol}", latency=120, release=answer)
    run_id = unlucky.start_run(symbol)
    wait_until(
        lambda: len(unlucky.calls(symbol)) == 3,  # every quota unit reserved, every call sent
        what=f"{run_id}: three calls in flight; logs:\n{log_tails(stack)}",
    )
    emulator = unlucky.emulator()
    emulator.kill(signal.SIGSTOP)  # Firestore pauses before the PNGs are even written
    try:
        answer.set()
        # the first ERROR of the run is the fence's read failing (whatever follows it)
        wait_until(
            lambda: [line for line in unlucky.worker_lines(run_id) if line["severity"] == "ERROR"],
            what=f"{run_id}: the fence meeting the pause; logs:\n{log_tails(stack)}",
        )
        pngs_while_paused = [n for n in stack.objects(f"charts/{run_id}/{STEP}/") if n.endswith(".png")]
    finally:
        emulator.kill(signal.SIGCONT)
    assert len(pngs_while_paused) == 3

    unlucky.finished(run_id)

    step = unlucky.step(run_id)
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 2), (step.get("error"), log_tails(stack))
    assert len(unlucky.calls(symbol)) == 3  # the retry paid for nothing
    items = unlucky.items(run_id)
    assert sorted(items) == sorted(TEMPLATES) and all(
        item["meta"]["reused"] is True for item in items.values()
    )
    wait_until(lambda: history(stack, run_id, STEP)[-1:] == ["SUCCEEDED"], what="the last version")
    assert "FAILED" not in history(stack, run_id, STEP)
    assert any(run_id in json.dumps(report["retried"]) for report in stack.reaper_reports)
    assert not [line for line in unlucky.worker_lines(run_id) if line["message"] == "manifest write failed"]


def test_a_bucket_deleted_under_a_running_instance_answers_503_before_any_call(unlucky: Unlucky) -> None:
    stack, symbol = unlucky.stack, "DOTUSDT"
    storage = storage_client_for(stack.gcs_url)
    storage.bucket(stack.bucket).delete(force=True)
    try:
        run_id = unlucky.start_run(symbol)
        refused = wait_until(
            lambda: [
                d
                for d in stack.router.delivered(WORKER_TRIGGER, f"documents/flow_runs/{run_id}")
                if d.status == 503
            ],
            what=f"{run_id}: the worker's 503; logs:\n{log_tails(stack)}",
        )
        assert unlucky.calls(symbol) == []  # nothing paid for
        assert step_status(stack, run_id, STEP) == "READY" and "attempt" not in unlucky.step(run_id)
        leases = [lease.to_dict() for lease in stack.db.collection("step_leases").stream()]
        assert not [lease for lease in leases if (lease or {}).get("runId") == run_id]
        (line,) = [line for line in unlucky.worker_lines(run_id) if line["severity"] == "ERROR"]
        assert line["errorType"] == "StorageUnavailable" and f"'{stack.bucket}' not found" in line["reason"]
    finally:
        services.create_bucket(stack.gcs_url, stack.bucket, stack.project)

    # Eventarc's redelivery, once the bucket is back: the same event, sent again
    body, headers = as_delivered(refused[0])
    url = stack.functions[WORKER_TARGET].url + "/"
    with request.urlopen(request.Request(url, data=body, headers=headers)) as reply:
        assert reply.status == 200
    step = unlucky.step(run_id)
    assert (step["status"], step["attempt"]) == ("SUCCEEDED", 1), (step.get("error"), log_tails(stack))
    assert len(unlucky.calls(symbol)) == 3  # paid for once the bucket could store it
