"""The step types this worker handles (contract §2.1: CHART_EXPORT), decided here and nowhere else.

Whatever asks "is this step ours?" asks `handles`: the claim, the choice of a step, the event
filter, run-local, a run's progress, the stack's watch. A new step type is one more name in
HANDLED_STEP_TYPES; tests/unit/core/step/test_step_types.py fails when a step type is compared
anywhere else in src/.

Imports only core.types and `re`: the functions' no-op path imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from worker_chart_export.core.types import CHART_EXPORT

HANDLED_STEP_TYPES: frozenset[str] = frozenset({CHART_EXPORT})

# A serialized step (an event's, still protobuf) can only be of a handled type if its bytes
# hold the type's name: protobuf stores strings verbatim.
_HANDLED_NAMES = tuple(name.encode() for name in sorted(HANDLED_STEP_TYPES))
# a bound `search`, so that the event filter can pass it to filter() and scan a document's
# steps without a Python-level loop
mentions_a_handled_type = re.compile(b"|".join(re.escape(name) for name in _HANDLED_NAMES)).search


def handles(step: Mapping[str, object]) -> bool:
    """A step of a type this worker handles; any map (a document's step, an event's skim of
    one). A stepType that is not a string (an untrusted document's list or map) is none."""
    step_type = step.get("stepType")
    return isinstance(step_type, str) and step_type in HANDLED_STEP_TYPES


def names_a_handled_type(serialized: bytes) -> bool:
    """Whether a whole serialized document may hold a handled step (`in` on the bytes: on a
    long document cheaper than the expression's search)."""
    return any(name in serialized for name in _HANDLED_NAMES)
