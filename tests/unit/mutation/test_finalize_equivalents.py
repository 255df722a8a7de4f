"""The checks of service/finalize.py's listed equivalents (scripts/mutation_equivalents.txt,
block `service survivors (render)`): each applies the entry's mutant and compares it with the
code, over the finalizes that retry (a store blip waited out, an outage outlasting the
budget) and one that does not (a result the store refuses). Registered in
test_equivalents.py's list of checks by importing this module there.
"""

from __future__ import annotations

import io
import json
import math
import random
from collections.abc import Callable
from typing import Any

from unit.mutation.mutants import Equivalent, assert_same, checks, late
from unit.service.test_finalize import Blipping, Down, Refusing, claimed_store, context, step_of, succeeded
from worker_chart_export.logs import configure_logging
from worker_chart_export.service import finalize
from worker_chart_export.testing import FakeClock

# what a finalize's lines say, without the moment they were written
SAID = ("message", "severity", "attempt", "reason", "error", "intendedStatus", "code")


def finalized(store_of: Callable[[Any, FakeClock], Any], budget_seconds: float) -> Callable[[], Any]:
    """A finalize of a claimed step through `store_of(store, clock)`: what it gives (its
    value or exception, by assert_same), the step it leaves, the lines it logs and the sleeps
    it took, their jitter drawn from `random` seeded alike for the code and the mutant."""

    def run() -> Any:
        store, clock, stream = claimed_store(), FakeClock(), io.StringIO()
        configure_logging(service="worker-chart-export", env="test", stream=stream)
        state = random.getstate()
        random.seed(20261126)
        ctx = context(store_of(store, clock), clock, budget_seconds=budget_seconds)
        try:
            given = late(finalize, "finalize", ctx, succeeded(clock))()
        except Exception as exc:  # an exception is part of what the finalize gives
            given = (type(exc).__name__, str(exc))
        finally:
            random.setstate(state)
            configure_logging(service="worker-chart-export", env="test")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        said = [{key: line[key] for key in SAID if key in line} for line in lines]
        return given, step_of(store)["status"], said, clock.sleeps

    return run


@checks
def test_a_finalize_retries_and_says_so_alike(entry: Equivalent) -> None:
    """tenacity calls `before_sleep` only after a failed attempt, whose outcome it has set:
    the guard against no outcome never decides anything."""
    assert_same(entry, finalized(lambda store, clock: Blipping(store, blips=2), 30.0))
    assert_same(entry, finalized(lambda store, clock: Down(store, clock, seconds=math.inf), 2.0))
    assert_same(entry, finalized(lambda store, clock: Refusing(store, refusals=1), 30.0))
