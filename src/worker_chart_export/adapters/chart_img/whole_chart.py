"""A 200 from CHART-IMG: the chart when its body is a whole PNG, else a transient failure
(core/png.py), with its log line and a warning when its size is not the size asked."""

from __future__ import annotations

from typing import Any

from worker_chart_export.adapters.chart_img.attempts import AttemptPass
from worker_chart_export.adapters.chart_img.call_logs import log_request
from worker_chart_export.adapters.chart_img.http import HttpAnswer
from worker_chart_export.core.chart_img.answers import Disposition, not_a_png
from worker_chart_export.core.clock import Clock
from worker_chart_export.core.png import check_png
from worker_chart_export.core.templates.chart_request import requested_size
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartSuccess


def chart_or_retry(
    call: ChartCall, answer: HttpAnswer, account_id: str, log: Any, timing: tuple[Clock, float]
) -> AttemptPass:
    """A 200: the chart when its body is a whole PNG (core/png.py), else a transient
    failure, tried again (a body cut short, an HTML page: never a fixture). `timing`: the
    clock and the moment the call was sent, for its log line."""
    clock, started = timing
    check = check_png(answer.content)
    if not check.whole:
        assert check.problem is not None
        error = not_a_png(answer.content_type, len(answer.content), check.problem)
        log_request(log, clock, started, 200, error)
        return AttemptPass(Disposition.RETRY, ChartFailure(error))
    log_request(log, clock, started, 200, None)
    asked = requested_size(call.body)
    if asked != (check.width, check.height):
        log.warning(
            "chart size differs from the size asked",
            askedWidth=asked[0],
            askedHeight=asked[1],
            width=check.width,
            height=check.height,
        )
    return AttemptPass(None, ChartSuccess(answer.content, account_id), answer)
