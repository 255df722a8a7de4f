"""The property: whatever keys are configured, no form of any of them leaves through any exit.

For each drawn set of keys (printable ASCII with the characters JSON and URLs escape), the
real exits are driven, with the real parts:
- execute_step on the Firestore emulator and fake-gcs-server with the real HTTP chart API,
  against a CHART-IMG stand-in that echoes the request's key in every form
  (`secret_scan.key_forms`) in its error bodies: a 422 about the request (into the
  manifest's failures and the log) and a 401 for every key (each key refused twice: its
  `disabledReason` stored in Firestore);
- the CLI in-process, as a person runs it: `accounts --json` over Firestore (with a usage
  document planted as an older worker would have left it, its reasons quoting every form),
  `view` of a manifest planted in the bucket the same way, `templates sync --dry-run` on a
  folder holding the accounts file beside the templates, `accounts --check-file` on a file
  that types a key as a field name and repeats a key as an id, and `run-local` in real mode
  against the stand-in (its summary, its logs, every file it wrote);
judged by tests/harness/secret_scan.leaks over every Firestore document, every object in the
bucket, every log line, everything printed and every file written. The planted documents
are removed before the stores are scanned: they hold the keys on purpose.
"""

from __future__ import annotations

import json
import shutil
import string
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from harness.builders import REPO, TEMPLATES_DIR, chart_step, flow_run, load_templates
from harness.chart_img_server import ChartImgServer, register_templates_from
from harness.firestore_emulator import FirestoreEmulator, dump_documents
from harness.logs import LogCapture
from harness.secret_scan import key_forms, leaks
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.firestore import (
    FirestoreFlowRunStore,
    FirestoreTemplateSource,
    FirestoreUsageStore,
)
from worker_chart_export.adapters.gcs import GcsArtifactStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.cli.main import main
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.logs import configure_logging
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.settings import Settings

pytestmark = pytest.mark.emulators

FORMS = tuple(key_forms("x" * 16))
KEY_ALPHABET = string.ascii_letters + string.digits + '/"\\+%=&?#-_.~'
# Hypothesis also draws the literals of the code it runs (6.170 drew 'on_flow_run_updated'):
# such a "key" is words the program and its fixtures print on their own, which no key is,
# and whose runs of 8 the scan rightly finds everywhere. Keys share no run with that text.
OWN_WORDS = "\n".join(
    path.read_text(encoding="utf-8", errors="replace")
    for folder in ("src", "tests", "chart-templates", "fixtures")
    for path in (REPO / folder).rglob("*")
    if path.suffix in (".py", ".json") and path.is_file()
)


def _none_of_our_own_words(key: str) -> bool:
    return not any(key[i : i + 8] in OWN_WORDS for i in range(max(1, len(key) - 7)))


def test_a_key_made_of_the_programs_own_words_is_not_drawn() -> None:
    """The one Hypothesis drew (the worker's function name), one with a run of 8 of it, and
    a key of random characters, which stays."""
    assert not _none_of_our_own_words("on_flow_run_updated")
    assert not _none_of_our_own_words("Xq9_flow_run_upd")
    assert _none_of_our_own_words(uuid.uuid4().hex)  # drawn now: in no file


LIMITS = StepLimits.within_request(request_timeout_seconds=300.0, finalize_budget_seconds=10)
ECHO: dict[str, Any] = {"undocumented": True, "echo_key": FORMS}


class Exits:
    """Everything that left the process, gathered for the scan."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def printed(self, capsys: pytest.CaptureFixture[str]) -> str:
        out, err = capsys.readouterr()
        self.texts += [out, err]
        return out + err

    def files(self, root: Path) -> None:
        self.texts += [p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()]


def accounts_json(keys: list[str]) -> str:
    return json.dumps(
        [{"id": f"acc{i}", "apiKey": key, "ratePerSecond": 50, "burst": 10} for i, key in enumerate(keys)]
    )


def every_form(keys: list[str]) -> str:
    return " ".join(form for key in keys for form in key_forms(key).values())


def served_ports(
    firestore_client: Any, storage_client: Any, bucket: str, server: ChartImgServer, keys: list[str]
) -> Ports:
    settings = Settings(
        charts_api_mode="real",
        chart_img_base_url=server.base_url,
        chart_img_accounts_json=SecretStr(accounts_json(keys)),
        chart_img_request_timeout_seconds=10.0,
        charts_fixtures_dir=Path("/nonexistent"),
    )
    usage = FirestoreUsageStore(firestore_client, clock=SYSTEM_CLOCK)
    return Ports(
        flow_runs=FirestoreFlowRunStore(firestore_client, clock=SYSTEM_CLOCK),
        templates=FirestoreTemplateSource(firestore_client, clock=SYSTEM_CLOCK),
        artifacts=GcsArtifactStore(storage_client, bucket, clock=SYSTEM_CLOCK),
        chart_api=build_chart_api(settings, usage, seams=Seams(clock=SYSTEM_CLOCK)),
    )


def run_the_worker(firestore_client: Any, ports: Ports, run_id: str, symbol: str, keys: list[str]) -> None:
    """One step; its producer wrote every form into the run's flowKey, which the worker logs
    (removed again before Firestore is scanned: the producer's words, not the worker's)."""
    doc = flow_run({"charts": chart_step()}, run_id=run_id, symbol=symbol) | {"flowKey": every_form(keys)}
    run = firestore_client.collection("flow_runs").document(run_id)
    run.set(doc)
    report = execute_step(run_id, "charts", ports=ports, limits=LIMITS, clock=SYSTEM_CLOCK)
    # every chart failed and was written down; whether the step ended or waits is not judged
    # here (a lone key refused for a known-good chart too is disabled, and its step waits for
    # the key's probe: core/step/patience.py), only that no form of a key left through it
    assert report.outcome in ("FAILED", "WAITING") and report.failures_count == 3
    run.update({"flowKey": "test_flow"})


def planted_manifest(run_id: str, keys: list[str]) -> dict[str, Any]:
    """A manifest as an older worker could have written it: failures quoting every form."""
    failures = [
        {
            "request": {"chartTemplateId": f"t{i}_v1"},
            "error": {"code": "CHART_API_FAILED", "message": f"refused {form}", "details": {"message": form}},
        }
        for i, form in enumerate(form for key in keys for form in key_forms(key).values())
    ]
    return {
        "schemaVersion": 1,
        "runId": run_id,
        "stepId": "charts",
        "createdAt": "2026-11-22T04:12:04.000Z",
        "symbol": "BTCUSDT",
        "timeframe": "1h",
        "minImages": 1,
        "requested": [f["request"] for f in failures],
        "items": [],
        "failures": failures,
    }


# no shrinking: each example drives every exit (seconds), and the first failing one says enough
@settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    keys=st.lists(
        st.text(alphabet=KEY_ALPHABET, min_size=16, max_size=40).filter(_none_of_our_own_words),
        min_size=1,
        max_size=3,
        unique=True,
    )
)
def test_no_form_of_any_configured_key_leaves_through_any_exit(
    keys: list[str],
    firestore_emulator: FirestoreEmulator,
    firestore_client: Any,
    gcs_bucket: tuple[Any, str],
    chart_img_server: ChartImgServer,
    log_capture: LogCapture,
    capsys: pytest.CaptureFixture[str],
    settings_environment: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    storage_client, bucket = gcs_bucket
    tmp = tmp_path_factory.mktemp("exits")
    firestore_emulator.reset()
    configure_logging(service="worker-chart-export", env="test", stream=log_capture.stream)
    for i, key in enumerate(keys):
        chart_img_server.add_account(f"acc{i}", key=key)
        chart_img_server.script(key=key, status=401, message="Unauthorized key", **ECHO)
    chart_img_server.script(symbol="BINANCE:FINALUSDT", status=422, message="Bad request", **ECHO)
    register_templates_from(chart_img_server, TEMPLATES_DIR)
    for template_id, template in load_templates().items():
        firestore_client.collection("chart_templates").document(template_id).set(template)
    exits = Exits()

    # the served worker's exits: the run document, the usage documents, the manifest, the log
    ports = served_ports(firestore_client, storage_client, bucket, chart_img_server, keys)
    run_the_worker(firestore_client, ports, f"final_{uuid.uuid4().hex[:8]}", "FINALUSDT", keys)
    run_the_worker(firestore_client, ports, f"refused_{uuid.uuid4().hex[:8]}", "BTCUSDT", keys)
    assert "<redacted>" in log_capture.events("claim succeeded")[0]["flowKey"]
    usage = {d.id: d.to_dict() for d in firestore_client.collection("chart_img_accounts_usage").stream()}
    assert all(usage[f"acc{i}"].get("disabled") for i in range(len(keys)))

    # the CLI's exits, over documents an older worker could have left
    settings_environment(
        FIRESTORE_EMULATOR_HOST=firestore_emulator.host,
        GOOGLE_CLOUD_PROJECT=firestore_emulator.project,
        CHART_IMG_ACCOUNTS_JSON=accounts_json(keys),
        CHART_IMG_BASE_URL=chart_img_server.base_url,
    )
    planted_usage = firestore_client.collection("chart_img_accounts_usage").document("acc0")
    planted_usage.update(
        {"disabledReason": every_form(keys)[:2000], "exhaustedReason": every_form(keys[::-1])[:2000]}
    )
    assert main(["accounts", "--json"]) == 0
    assert "<redacted>" in exits.printed(capsys)

    planted = f"charts/planted_{uuid.uuid4().hex[:8]}/charts/manifest.json"
    blob = storage_client.bucket(bucket).blob(planted)
    blob.upload_from_string(
        json.dumps(planted_manifest(planted.split("/")[1], keys)), content_type="application/json"
    )
    page = tmp / "page.html"
    assert main(["view", f"gs://{bucket}/{planted}", "--out", str(page)]) == 0
    exits.printed(capsys)
    exits.texts.append(page.read_text())
    assert "&lt;redacted&gt;" in exits.texts[-1]

    folder = tmp / "templates"
    shutil.copytree(TEMPLATES_DIR, folder)
    (folder / "chart-img.accounts.json").write_text(accounts_json(keys))
    (folder / "settings.json").write_text(json.dumps({"apiKey": keys[0]}))
    (folder / "broken.json").write_text(json.dumps({"id": "broken", "request": keys, "tags": [keys[0]] * 2}))
    assert main(["templates", "sync", "--dry-run", "--dir", str(folder)]) == 1
    assert "chart-img.accounts.json: skipped" in exits.printed(capsys)

    bad_file = tmp / "bad.accounts.json"
    bad_file.write_text(
        json.dumps(
            [{"id": "acc1", keys[0]: "x", "plan": keys[-1]}, {"id": keys[0][:8] + "a", "apiKey": keys[0]}] * 2
        )
    )
    assert main(["accounts", "--check-file", str(bad_file)]) == 2
    exits.printed(capsys)

    source = tmp / "flow_run.json"
    source.write_text(json.dumps(flow_run({"charts": chart_step()}, run_id="local1", symbol="FINALUSDT")))
    (tmp / "accounts.json").write_text(accounts_json(keys))
    out = tmp / "out"
    argv = ["run-local", f"--flow-run-path={source}", f"--output-dir={out}", "--charts-api-mode=real"]
    assert main([*argv, f"--accounts-config-path={tmp / 'accounts.json'}"]) == 1
    assert "CHART_EXPORT FAILED" in exits.printed(capsys)
    exits.files(out)

    # the stores, without what was planted
    planted_usage.update({"disabledReason": "", "exhaustedReason": ""})
    blob.delete()
    exits.texts.append(dump_documents(firestore_client))
    exits.texts += [
        b.download_as_text() for b in storage_client.list_blobs(bucket) if b.name.endswith(".json")
    ]
    manifests = [json.loads(t) for t in exits.texts[-2:] if t.startswith("{")]
    assert any("<redacted>" in json.dumps(m.get("failures")) for m in manifests)
    exits.texts.append(log_capture.text)
    assert leaks(exits.texts, keys) == []
