"""The success rule (contract §7.1) and the step error of a FAILED outcome."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from worker_chart_export.core.error_codes import ErrorCode, StepError
from worker_chart_export.core.types import StepStatus

# When failures of several kinds sink a step, the step error names the most frequent kind;
# ties go to the kind an operator must act on first.
_TIE_PRIORITY = [
    ErrorCode.GCS_WRITE_FAILED,
    ErrorCode.CHART_API_LIMIT_EXCEEDED,
    ErrorCode.CHART_API_FAILED,
    ErrorCode.CHART_API_MOCK_MISSING,
]


def step_status(items_count: int, min_images: int) -> StepStatus:
    return StepStatus.SUCCEEDED if items_count >= min_images else StepStatus.FAILED


def insufficient_images_error(
    items_count: int, min_images: int, requested_count: int, failure_codes: Sequence[ErrorCode]
) -> StepError:
    counts = Counter(failure_codes)
    if counts:
        code = max(counts, key=lambda c: (counts[c], -_TIE_PRIORITY.index(c) if c in _TIE_PRIORITY else -99))
    else:
        code = ErrorCode.CHART_API_FAILED
    summary = ", ".join(f"{n} {c.value}" for c, n in sorted(counts.items()))
    return StepError(
        code,
        f"{items_count} of {requested_count} charts rendered, fewer than minImages={min_images}"
        + (f" ({summary})" if summary else ""),
        {
            "itemsCount": items_count,
            "minImages": min_images,
            "requestedCount": requested_count,
            "failureCodes": {c.value: n for c, n in sorted(counts.items())},
        },
    )
