"""The chart templates a step asks for: read before its claim wherever the event shows the step,
so that a store blip there claims nothing (docs/design.md, "A transient store error is never
terminal"), and read again after it, so that the version drawn is the one current at the claim.

- Before the claim, from the version of the run the event carried: a transient store error is
  a RedeliverEvent with nothing claimed, no lease and no attempt spent; the step stays READY
  and the redelivered event runs it.
- After the claim, every template the claimed version asks for: an edit committed between the
  read before the claim and the claim is the version drawn (the chaos benchmark's judge calls
  the older one stale). A transient store error there draws those read before the claim when
  they are all of them (the step goes on; only an edit in that window is missed), else (no
  version came with the event: run-local, an event not decodable whole; or the version claimed
  asks for templates the event's did not) it is a RedeliverEvent raised inside the claimed
  step, which keeps its lease for the reaper, as the manifest's fence does
  (service/execute.py). Nothing has been paid for yet; the reaper bounds the tries
  (STEP_MAX_ATTEMPTS, then STEP_LEASE_EXPIRED).
Never a FAILED step for a blip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker_chart_export.core.exceptions import RedeliverEvent, TransientStoreError
from worker_chart_export.core.step.step_rules import RunVersion, step_of
from worker_chart_export.core.step.validation import requested_template_ids
from worker_chart_export.core.templates.template_check import StoredTemplate
from worker_chart_export.service.step_context import StepContext

if TYPE_CHECKING:
    from worker_chart_export.core.documents import StepDocument


@dataclass(frozen=True)
class TemplatesRead:
    """The ids asked for before the claim and the templates found among them."""

    asked: frozenset[str]
    found: Mapping[str, StoredTemplate]

    def of(self, template_ids: Sequence[str]) -> dict[str, StoredTemplate] | None:
        """The templates of `template_ids` when all were asked for (found or not), else None."""
        if not self.asked.issuperset(template_ids):
            return None
        return {t: self.found[t] for t in template_ids if t in self.found}


def read_before_claim(ctx: StepContext, seen: RunVersion | None) -> TemplatesRead | None:
    """The templates the step asks for in the event's version; None without one."""
    step = step_of(seen.document, ctx.step_id) if seen is not None else None
    if step is None:
        return None
    template_ids = requested_template_ids(step)
    found = _read(ctx, template_ids, f"before its claim: step {ctx.step_id} not claimed")
    return TemplatesRead(frozenset(template_ids), found)


def templates_of(
    ctx: StepContext, step: StepDocument | None, before: TemplatesRead | None
) -> Mapping[str, StoredTemplate]:
    """The templates the claimed `step` asks for, read now; on a blip, those read before the
    claim when they are all of them (else the step is left to its lease)."""
    template_ids = requested_template_ids(step)
    known = before.of(template_ids) if before is not None else None
    try:
        return _read(ctx, template_ids, f"after its claim: step {ctx.step_id} left to its lease")
    except RedeliverEvent as blip:
        if known is None:
            raise
        ctx.log.warning(
            "chart templates not read again after the claim: drawing those read before it",
            reason=str(blip.__cause__),
        )
        return known


def _read(ctx: StepContext, template_ids: Sequence[str], when: str) -> Mapping[str, StoredTemplate]:
    try:
        return ctx.ports.templates.get_templates(template_ids)
    except TransientStoreError as exc:
        raise RedeliverEvent(f"chart templates could not be read {when}: {exc}") from exc
