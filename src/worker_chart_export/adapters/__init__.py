"""Adapters implementing the ports of `worker_chart_export.service.ports`."""
