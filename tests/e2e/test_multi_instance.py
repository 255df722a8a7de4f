"""Three served instances of the worker, one configuration, one Firestore emulator, one
fake-gcs-server and one CHART-IMG stand-in in its own process that answers 429 past a key's
rate or burst, as CHART-IMG does. The shared state (claims, daily quota, pacing) lives in
Firestore only, so what must hold across instances is checked here:

- one BASIC key (1/s, burst 3) shared by three steps at once: no 429, every chart rendered;
- one key with dailyLimit=5 and twelve charts at once: exactly five calls, the rest refused;
- one event delivered ten times over the three instances: one claim, one call per template.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.multi_instance import MultiInstanceStack, StandInAccount, running_instances
from e2e.stack import new_run_id, wait_until
from harness.builders import TEMPLATES_DIR, chart_step_for, flow_run, load_templates
from harness.firestore_emulator import FirestoreEmulator
from harness.gcs_emulator import GcsEmulator

pytestmark = pytest.mark.emulators

INSTANCES = 3
STEP = "charts_1h"
# the four bundled Advanced Chart templates: a 4-chart step (the layout template has its
# own e2e test, test_layout_charts.py)
TEMPLATE_IDS = sorted(t for t, template in load_templates().items() if "layout" not in template)
# A tight request budget, so that "rendered within its budget" means something: the step
# has 60 - 30 (finalize) = 30 s, of which charts get 24 s; the rate bound below is ~10 s.
TIGHT_BUDGET_ENV = {"REQUEST_TIMEOUT_SECONDS": "60"}


def four_chart_run(run_id: str, *, min_images: int = 4) -> dict[str, Any]:
    return flow_run({STEP: chart_step_for(TEMPLATE_IDS, min_images=min_images)}, run_id=run_id)


def start_steps_at_once(
    stack: MultiInstanceStack, label: str, *, min_images: int = 4
) -> tuple[list[str], list[int]]:
    """One 4-chart step per instance, all delivered at the same moment; (run ids, statuses)."""
    runs = []
    for worker in stack.workers:
        run_id = new_run_id(label)
        document = four_chart_run(run_id, min_images=min_images)
        stack.create_run(run_id, document)
        runs.append((worker, run_id, document, f"evt-{run_id}"))
    statuses = stack.deliver_at_once(runs)
    return [run_id for _, run_id, _, _ in runs], statuses


def logs_of(stack: MultiInstanceStack) -> str:
    return "\n".join(worker.log_tail(3000) for worker in stack.workers)


@pytest.fixture
def basic_stack(
    firestore_emulator: FirestoreEmulator, gcs_emulator: GcsEmulator
) -> Iterator[MultiInstanceStack]:
    account = StandInAccount("basic1", rate=1.0, burst=3, config={"plan": "BASIC"})
    with running_instances(
        firestore_emulator, gcs_emulator.url, [account], instances=INSTANCES, extra_env=TIGHT_BUDGET_ENV
    ) as stack:
        yield stack


def test_one_basic_key_shared_by_three_instances_never_sees_a_429(basic_stack: MultiInstanceStack) -> None:
    stack = basic_stack
    run_ids, statuses = start_steps_at_once(stack, "basic")

    assert statuses == [200] * INSTANCES, logs_of(stack)
    for run_id in run_ids:
        step = stack.flow_run_ref(run_id).get().to_dict()["steps"][STEP]
        assert step["status"] == "SUCCEEDED", (step, logs_of(stack))
        manifest = stack.manifest(run_id, STEP)
        assert manifest["failures"] == [], json.dumps(manifest["failures"])
        assert sorted(item["chartTemplateId"] for item in manifest["items"]) == TEMPLATE_IDS
    requests = stack.stand_in.requests()
    assert [r["status"] for r in requests] == [200] * (INSTANCES * len(TEMPLATE_IDS)), Counter(
        (r["status"], r["message"]) for r in requests
    )
    # the stand-in answered no 429, so the rate held at its door: the paced calls spread over
    # at least (12 - burst 3) / 1 per second, minus the instances' clock jitter
    arrivals = sorted(r["arrived"] for r in requests)
    assert arrivals[-1] - arrivals[0] >= 9 * 0.95
    assert stack.usage("basic1")["usageToday"] == INSTANCES * len(TEMPLATE_IDS)


@pytest.fixture
def limited_stack(
    firestore_emulator: FirestoreEmulator, gcs_emulator: GcsEmulator
) -> Iterator[MultiInstanceStack]:
    # The stand-in does not enforce the quota: a thirteenth call would be answered 200 and
    # counted, so only the workers' shared usage document keeps the count at five.
    account = StandInAccount("daily5", config={"dailyLimit": 5, "ratePerSecond": 50, "burst": 20})
    with running_instances(firestore_emulator, gcs_emulator.url, [account], instances=INSTANCES) as stack:
        yield stack


def test_a_daily_limit_of_five_allows_exactly_five_calls_across_instances(
    limited_stack: MultiInstanceStack,
) -> None:
    stack = limited_stack
    run_ids, statuses = start_steps_at_once(stack, "daily", min_images=1)

    assert statuses == [200] * INSTANCES, logs_of(stack)
    assert len(stack.stand_in.requests()) == 5
    assert stack.usage("daily5")["usageToday"] == 5
    items, failures = [], []
    for run_id in run_ids:
        manifest = stack.manifest(run_id, STEP)
        items += manifest["items"]
        failures += manifest["failures"]
    assert len(items) == 5
    assert [f["error"]["code"] for f in failures] == ["CHART_API_LIMIT_EXCEEDED"] * 7


@pytest.fixture
def fast_stack(
    firestore_emulator: FirestoreEmulator, gcs_emulator: GcsEmulator
) -> Iterator[MultiInstanceStack]:
    account = StandInAccount("fast1", config={"ratePerSecond": 50, "burst": 20})
    with running_instances(
        firestore_emulator, gcs_emulator.url, [account], instances=INSTANCES, templates_dir=TEMPLATES_DIR
    ) as stack:
        yield stack


def test_ten_copies_of_one_event_over_three_instances_run_the_step_once(
    fast_stack: MultiInstanceStack,
) -> None:
    stack = fast_stack
    run_id = new_run_id("copies")
    document = four_chart_run(run_id)
    stack.create_run(run_id, document)
    event_id = f"evt-{run_id}"
    deliveries = [(stack.workers[i % INSTANCES], run_id, document, event_id) for i in range(10)]

    statuses = stack.deliver_at_once(deliveries)

    # a loser that gave up on contention while the step was still READY asks for redelivery
    assert set(statuses) <= {200, 500} and 200 in statuses, statuses
    step = stack.flow_run_ref(run_id).get().to_dict()["steps"][STEP]
    assert step["status"] == "SUCCEEDED", (step, logs_of(stack))
    assert len(stack.log_lines("claim succeeded", run_id)) == 1
    # every instance warms itself up after it starts (in gunicorn's worker, after fork, in
    # the background: on a busy machine it may still be finishing)
    wait_until(
        lambda: len(stack.log_lines("instance warmed up")) == INSTANCES,
        what=f"{INSTANCES} warm-ups; logs: {logs_of(stack)}",
    )
    per_template = Counter(r["template"] for r in stack.stand_in.requests())
    assert per_template == dict.fromkeys(TEMPLATE_IDS, 1)
