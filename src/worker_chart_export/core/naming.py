"""Deterministic names: GCS object paths, PNG file names, fixture keys.

The rules are written down in contracts/charts_images_naming.md; keep the two in step.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

# Firestore collections (worker contract §14, orchestration rules).
FLOW_RUNS_COLLECTION = "flow_runs"
CHART_TEMPLATES_COLLECTION = "chart_templates"
ACCOUNTS_USAGE_COLLECTION = "chart_img_accounts_usage"
# One document per RUNNING step with a lease: what the reaper queries (by expiresAt).
STEP_LEASES_COLLECTION = "step_leases"
LEASE_EXPIRY_FIELD = "expiresAt"  # the field the reaper's range query (and its index) is on

# runId, stepId and chartTemplateId become path segments: only this shape is accepted.
SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CHARTS_PREFIX = "charts"
MANIFEST_NAME = "manifest.json"
FIXTURE_PROVIDER_DIR = "chart-img/advanced-chart-v2"


def lease_document_id(run_id: str, step_id: str) -> str:
    """The step_leases document of one step: a digest, so any ids (even ones unfit for a
    document id) map to a valid, unique one; the ids themselves are fields of the document."""
    return hashlib.sha256(f"{run_id}\x00{step_id}".encode()).hexdigest()[:40]


def is_safe_segment(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(SAFE_SEGMENT.fullmatch(value)) and ".." not in value


def compact_utc(moment: datetime) -> str:
    """`YYYYMMDDTHHMMSSmmmZ`: sortable, filename-safe, millisecond precision, always UTC."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y%m%dT%H%M%S") + f"{moment.microsecond // 1000:03d}Z"


def rfc3339_utc(moment: datetime) -> str:
    """RFC 3339 in UTC with millisecond precision and a `Z` suffix."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def moment_of(value: Any) -> datetime | None:
    """A timestamp, epoch seconds or ISO-8601 text as an aware UTC datetime; None otherwise."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            return moment_of(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except (ValueError, OverflowError, OSError):
        return None
    return None


# A symbol named as it is in slugs and fixture keys: `EXCHANGE:NAME`-like, short. Any other
# (continuous futures' `!`, a `/`, a formula, anything long) gets a readable part and a digest.
_PLAIN_SYMBOL = re.compile(r"[A-Za-z0-9]+(?:[_.:-][A-Za-z0-9]+)*")
MAX_PLAIN_SYMBOL_CHARS = 64
READABLE_CHARS = 40  # of a digested symbol's name part
DIGEST_CHARS = 10


def _is_plain(chart_img_symbol: str) -> bool:
    return len(chart_img_symbol) <= MAX_PLAIN_SYMBOL_CHARS and bool(_PLAIN_SYMBOL.fullmatch(chart_img_symbol))


def _digested(readable: str, chart_img_symbol: str) -> str:
    """`<readable, cut short>-<first hex digits of its SHA-256>`: different symbols whose
    readable parts agree (`A+B`, `A-B`) keep different names."""
    digest = hashlib.sha256(chart_img_symbol.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{readable[:READABLE_CHARS].strip('-_') or 'UNKNOWN'}-{digest[:DIGEST_CHARS]}"


def symbol_slug(chart_img_symbol: str) -> str:
    """`BINANCE:BTCUSDT` -> `BINANCE-BTCUSDT`, `BYBIT:BTCUSDT.P` -> `BYBIT-BTCUSDT.P`.

    Plain symbols are upper-cased, every run of characters outside [A-Z0-9.] becomes one `-`,
    no leading or trailing `-`. Any other symbol (`CME_MINI:ES1!`, `BMV:CEMEX/CPO`, a formula,
    anything over 64 characters) becomes its runs of [A-Z0-9] joined by `-`, cut to 40
    characters, then `-` and 10 hex digits of its SHA-256 (upper case): `CME-MINI-ES1-<DIGEST>`. A slug
    is never empty and contains only [A-Z0-9.-] (no `_`, which separates the parts of a PNG
    name; no `/`; never `..`).
    """
    if _is_plain(chart_img_symbol):
        return re.sub(r"[^A-Z0-9.]+", "-", chart_img_symbol.upper()).strip("-")
    readable = re.sub(r"[^A-Z0-9]+", "-", chart_img_symbol.upper()).strip("-")
    return _digested(readable, chart_img_symbol).upper()


def step_prefix(run_id: str, step_id: str) -> str:
    for name, value in (("runId", run_id), ("stepId", step_id)):
        if not is_safe_segment(value):
            raise ValueError(f"{name} {value!r} is not a safe path segment")
    return f"{CHARTS_PREFIX}/{run_id}/{step_id}"


def png_object_path(
    run_id: str,
    step_id: str,
    generated_at: datetime,
    chart_img_symbol: str,
    timeframe: str,
    chart_template_id: str,
) -> str:
    if not is_safe_segment(chart_template_id):
        raise ValueError(f"chartTemplateId {chart_template_id!r} is not a safe path segment")
    name = f"{compact_utc(generated_at)}_{symbol_slug(chart_img_symbol)}_{timeframe}_{chart_template_id}.png"
    return f"{step_prefix(run_id, step_id)}/{name}"


# What each part of a PNG name may hold when it is read back: none holds `_` but the
# template id (the last part), so the first three `_` split it (charts_images_naming.md §2).
_COMPACT_UTC = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{3})Z", re.ASCII)
_SLUG = re.compile(r"[A-Z0-9][A-Z0-9.-]{0,63}")
_TIMEFRAME = re.compile(r"[0-9]{1,4}[A-Za-z]")
PNG_SUFFIX = ".png"


@dataclass(frozen=True)
class PngName:
    """The parts of a PNG object path, as `png_object_path` wrote them."""

    run_id: str
    step_id: str
    generated_at: datetime  # UTC, to the millisecond
    symbol_slug: str
    timeframe: str
    chart_template_id: str


def parse_compact_utc(text: str) -> datetime:
    """`compact_utc`'s form back to the instant (UTC); ValueError for anything else."""
    match = _COMPACT_UTC.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a YYYYMMDDTHHMMSSmmmZ moment")
    year, month, day, hour, minute, second, millis = (int(part) for part in match.groups())
    return datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=UTC)


def parse_png_object_path(object_path: str) -> PngName:
    """`png_object_path`'s result read back into its parts. Any other name (the manifest, a
    name another writer chose, a part out of shape) raises ValueError saying which part."""
    segments = object_path.split("/")
    if len(segments) != 4 or segments[0] != CHARTS_PREFIX:
        raise ValueError(f"{object_path!r} is not charts/<runId>/<stepId>/<name>")
    _, run_id, step_id, name = segments
    if not name.endswith(PNG_SUFFIX):
        raise ValueError(f"{object_path!r} is not a .png")
    parts = name.removesuffix(PNG_SUFFIX).split("_", 3)
    if len(parts) != 4:
        raise ValueError(f"{object_path!r}: a PNG name has four parts joined by '_'")
    moment, slug, timeframe, template_id = parts
    for label, value, fits in (
        ("runId", run_id, is_safe_segment(run_id)),
        ("stepId", step_id, is_safe_segment(step_id)),
        ("symbolSlug", slug, bool(_SLUG.fullmatch(slug)) and ".." not in slug),
        ("timeframe", timeframe, bool(_TIMEFRAME.fullmatch(timeframe))),
        ("chartTemplateId", template_id, is_safe_segment(template_id)),
    ):
        if not fits:
            raise ValueError(f"{object_path!r}: {label} {value!r} is out of shape")
    return PngName(run_id, step_id, parse_compact_utc(moment), slug, timeframe, template_id)


def manifest_object_path(run_id: str, step_id: str) -> str:
    return f"{step_prefix(run_id, step_id)}/{MANIFEST_NAME}"


def gcs_uri(bucket: str, object_path: str) -> str:
    return f"gs://{bucket}/{object_path}"


def fixture_key(chart_img_symbol: str, timeframe: str, chart_template_id: str) -> str:
    """`BINANCE:BTCUSDT`, `1h`, `price_psar_adi_v1` -> `BINANCE_BTCUSDT__1h__price_psar_adi_v1`.

    A plain symbol: `:` becomes `_` (contract §12.2), as does any other character unsafe in a
    file name. Any other symbol: its runs of [A-Za-z0-9] joined by `_`, cut short, then `-`
    and a digest (as in `symbol_slug`), so `(A+B)/2` and `(A-B)/2` never share a fixture.
    """
    if _is_plain(chart_img_symbol):
        symbol_part = re.sub(r"[^A-Za-z0-9.-]", "_", chart_img_symbol)
    else:
        readable = re.sub(r"[^A-Za-z0-9]+", "_", chart_img_symbol).strip("_")
        symbol_part = _digested(readable, chart_img_symbol)
    return f"{symbol_part}__{timeframe}__{chart_template_id}"


def success_fixture_name(key: str) -> str:
    return f"{key}.png"


ERROR_FIXTURE_NAME = re.compile(r"^(?P<key>.+)__(?P<status>[1-5][0-9][0-9])_(?P<reason>[A-Z0-9_]+)\.json$")


def error_fixture_name(key: str, http_status: int, reason: str) -> str:
    """`<key>__429_LIMIT_EXCEEDED.json`; reason is upper-snake-cased from the API message."""
    reason_part = re.sub(r"[^A-Z0-9]+", "_", reason.upper()).strip("_") or "ERROR"
    return f"{key}__{http_status}_{reason_part}.json"
