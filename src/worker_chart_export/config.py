"""Transitional alias: `Settings` and `ChartsApiMode` now live in `worker_chart_export.settings`.

Kept only while adapters/ still import from here; delete it once they take plain values.
"""

from worker_chart_export.settings import ChartsApiMode, Settings

__all__ = ["ChartsApiMode", "Settings"]
