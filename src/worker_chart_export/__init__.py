"""worker-chart-export: renders CHART_EXPORT steps of flow_runs into PNGs and a manifest."""

SERVICE_NAME = "worker-chart-export"
