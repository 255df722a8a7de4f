"""Shared pytest set-up. Each harness module owns one real (or CHART-IMG-like) service."""

pytest_plugins = [
    "harness.secret_scan",
    "harness.logs",
    "harness.firestore_emulator",
    "harness.gcs_emulator",
    "harness.chart_img_server",
]
