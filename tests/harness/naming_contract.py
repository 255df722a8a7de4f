"""The naming contract (contracts/charts_images_naming.md) written out for tests from its text,
never imported from the worker: an expected object name or request digest made here is one
the code under test did not compute, so a worker that drifts from the contract fails.

- `request_sha256`: `requestDigest` ("What a PNG is, beyond its name"), the SHA-256 in 64
  lower-case hex digits of a request body as canonical JSON: keys sorted at every depth, no
  spaces, ASCII with `\\u` escapes. What travels on the wire is not canonical (the worker's
  HTTP client keeps the template's key order), so the digest is of the JSON value received.
- `png_name`: `charts/<runId>/<stepId>/<generatedAt>_<symbolSlug>_<timeframe>_<chartTemplateId>.png`
  (section 1), `<generatedAt>` in UTC as `YYYYMMDDTHHMMSSmmmZ`, microseconds truncated
  (section 2). The slug is the caller's, written out as the contract's table gives it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def request_sha256(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def png_name(run_id: str, step_id: str, moment: datetime, slug: str, timeframe: str, template: str) -> str:
    utc = moment.astimezone(UTC)
    generated_at = f"{utc:%Y%m%dT%H%M%S}{utc.microsecond // 1000:03d}Z"
    return f"charts/{run_id}/{step_id}/{generated_at}_{slug}_{timeframe}_{template}.png"
