"""Shared pytest set-up. Each harness module owns one real (or CHART-IMG-like) service."""

import os

# The tests' own Storage clients, like the worker's (adapters/gcs.py), skip the bucket
# metadata lookup google-cloud-storage would run in a background thread: left running after
# a test, its retries' jitter moves `random` under hypothesis's feet.
os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")

pytest_plugins = [
    "harness.secret_scan",
    "harness.logs",
    "harness.firestore_emulator",
    "harness.gcs_emulator",
    "harness.chart_img_server",
]
