"""Shared pytest set-up. Each harness module owns one real (or CHART-IMG-like) service."""

import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import settings as hypothesis_settings

from harness import lanes
from harness.lanes import pytest_xdist_make_scheduler  # noqa: F401 (a hook: the lanes' scheduler)
from worker_chart_export.logs import configure_logging

# The tests' own Storage clients, like the worker's (adapters/gcs.py), skip the bucket
# metadata lookup google-cloud-storage would run in a background thread: left running after
# a test, its retries' jitter moves `random` under hypothesis's feet.
os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")

# A mutation run (scripts/mutation.sh sets HYPOTHESIS_PROFILE=mutation) judges each mutant by
# its own examples: no example database, where an example saved while one mutant ran is
# replayed against all the others (one the code itself failed once had every mutant of
# core/redaction.py "killed"), and the same draws for every mutant, so a verdict judged again
# comes out the same.
hypothesis_settings.register_profile("mutation", database=None, derandomize=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

pytest_plugins = [
    "harness.secret_scan",
    "harness.logs",
    "harness.firestore_emulator",
    "harness.gcs_emulator",
    "harness.chart_img_server",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit lane of scripts/test.sh (harness/lanes.py): no unit test needs an emulator."""
    paths = [lanes.under_tests(item.path) for item in items]
    needing = lanes.unit_tests_needing_emulators(
        (path, item.nodeid, item.fixturenames if isinstance(item, pytest.Function) else [])
        for item, path in zip(items, paths, strict=True)
    )
    if needing:
        raise pytest.UsageError(
            "the unit tests run without the emulators (scripts/test.sh --unit has no Java, no gcloud): "
            + "; ".join(needing)
            + ". A test that needs one belongs in tests/integration."
        )


@pytest.fixture(autouse=True)
def _no_key_known_from_another_test() -> Iterator[None]:
    """The keys a test's accounts made known (worker_chart_export.known_keys) are forgotten
    after it: another test's text is not redacted by them."""
    from worker_chart_export import known_keys

    yield
    known_keys.forget_all()


@pytest.fixture(autouse=True)
def _logging_on_this_tests_stdout() -> None:
    """Each test starts with the worker's logging on the stdout pytest gives it now. A test
    that ran the CLI leaves structlog printing to that test's own captured stream, closed once
    the test ended: the next test to log would fail on it, in any order but the files' own
    (`mutmut` runs a mutant's tests in another order; a pytest-xdist worker runs an
    integration test after a unit test that ran the CLI)."""
    configure_logging(service="worker-chart-export", env="test")


@pytest.fixture
def settings_environment(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`settings_environment(THREADS="4")`: the worker's variables are exactly these (every
    other variable Settings reads is unset), as `load_settings` will read them."""
    from worker_chart_export.settings import Settings

    def only(**variables: str) -> None:
        for field in Settings.model_fields.values():
            monkeypatch.delenv(str(field.validation_alias), raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)

    return only
