"""Mode `record`: replay a fixture when there is one, else call CHART-IMG and save it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from worker_chart_export.adapters.chart_img.api import RealChartApi
from worker_chart_export.adapters.chart_img.session import StepSession
from worker_chart_export.adapters.fixtures import FixtureLibrary, replay
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img.answers import NOT_ABOUT_THE_REQUEST, classify, error_message
from worker_chart_export.core.types import ChartCall, ChartFailure, ChartResult
from worker_chart_export.logs import get_logger


class RecordChartApi:
    """Mode `record`: replay a fixture when there is one, else call CHART-IMG and save it."""

    mode = "record"

    def __init__(self, library: FixtureLibrary, real: RealChartApi) -> None:
        self.library = library
        self.real = real
        real.mode = self.mode  # the calls it sends for us are record mode's, in its logs too

    @contextmanager
    def for_step(self, first_wave: Sequence[ChartCall], budget: Budget) -> Iterator[RecordSession]:
        # quota only for the calls that will really go out
        unrecorded = [c for c in first_wave if self.library.lookup(c.fixture_key, c.endpoint) is None]
        with self.real.for_step(unrecorded, budget) as real:
            yield RecordSession(self.library, real)

    def close(self) -> None:
        self.real.close()


class RecordSession:
    """A step's renders in record mode: the real session (session.py) for what is not recorded."""

    mode = "record"

    def __init__(self, library: FixtureLibrary, real: StepSession) -> None:
        self.library = library
        self.real = real

    def render(self, call: ChartCall) -> ChartResult:
        log = get_logger().bind(
            runId=call.run_id,
            stepId=call.step_id,
            chartTemplateId=call.chart_template_id,
            chartsApi={"mode": self.mode, "fixtureKey": call.fixture_key},
        )
        recorded = self.library.lookup(call.fixture_key, call.endpoint)
        if recorded is not None:
            result = replay(recorded)
            error_code = result.error.code if isinstance(result, ChartFailure) else None
            log.info(
                "chart api fixture replayed",
                status="failed" if error_code else "succeeded",
                errorCode=error_code.value if error_code else None,
            )
            return result
        rendered = self.real.render_with_answer(call)
        answer = rendered.answer
        if answer is None:  # no HTTP answer (transport error) or 200-not-PNG: nothing to keep
            return rendered.result
        body = None if answer.status == 200 else answer.body
        if classify(answer.status, body, session_sent=call.layout is not None) in NOT_ABOUT_THE_REQUEST:
            # a 429, a 5xx, a refused key or session describes the moment, the key or the
            # session, not the chart: frozen as a fixture it would fail every later replay
            log.info("chart api answer not recorded: transient", httpStatus=answer.status)
            return rendered.result
        try:
            if answer.status == 200:
                path = self.library.save_png(call.fixture_key, answer.content, call.endpoint)
            else:
                reason = error_message(body) or "ERROR"
                path = self.library.save_error(call.fixture_key, answer.status, body, reason, call.endpoint)
            log.info("chart api fixture recorded", fixture=path.name, httpStatus=answer.status)
        except OSError as exc:  # recording is a convenience; the step goes on as in real mode
            log.warning("chart api fixture not recorded", errorKind=type(exc).__name__)
        return rendered.result
