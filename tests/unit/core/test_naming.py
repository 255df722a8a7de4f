from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from worker_chart_export.core import naming

MOMENT = datetime(2026, 11, 22, 4, 12, 3, 123456, tzinfo=UTC)


def test_compact_and_rfc3339_forms_name_the_same_instant() -> None:
    assert naming.compact_utc(MOMENT) == "20261122T041203123Z"
    assert naming.rfc3339_utc(MOMENT) == "2026-11-22T04:12:03.123Z"
    plus_three = MOMENT.astimezone(timezone(timedelta(hours=3)))
    assert naming.compact_utc(plus_three) == "20261122T041203123Z"


@pytest.mark.parametrize(
    ("symbol", "slug"),
    [
        ("BINANCE:BTCUSDT", "BINANCE-BTCUSDT"),
        ("BYBIT:BTCUSDT.P", "BYBIT-BTCUSDT.P"),
        ("binance:eth_usdt", "BINANCE-ETH-USDT"),
        ("LSE:RR", "LSE-RR"),
    ],
)
def test_symbol_slug_of_a_plain_symbol(symbol: str, slug: str) -> None:
    assert naming.symbol_slug(symbol) == slug
    assert "_" not in naming.symbol_slug(symbol)


FORMULA = "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10"
# What the grammar accepts beyond plain names, and what it refuses: naming is safe for both.
UNUSUAL_SYMBOLS = [
    "CME_MINI:ES1!",
    "BMV:CEMEX/CPO",
    "LSE:RR.",
    FORMULA,
    "(NASDAQ:MARA-NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10",
    "(" + "+".join(["NASDAQ:MARA"] * 16) + ")/1",
    ":::",
    "../../etc/passwd",
    "..",
    "A/../../B",
    "a\\b\x00c\nd e\u202ef",
    "\ud800",
    "",
    "x" * 5000,
]
SAFE_SLUG = re.compile(r"[A-Z0-9][A-Z0-9.-]{0,63}")
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@pytest.mark.parametrize("symbol", UNUSUAL_SYMBOLS)
def test_any_symbol_gives_a_safe_slug_and_png_name(symbol: str) -> None:
    slug = naming.symbol_slug(symbol)
    assert SAFE_SLUG.fullmatch(slug) and ".." not in slug, slug
    path = naming.png_object_path("run1", "charts", MOMENT, symbol, "1h", "tpl_v1")
    prefix, _, name = path.rpartition("/")
    assert prefix == "charts/run1/charts" and len(name.encode()) <= 255
    assert name.split("_", 3) == ["20261122T041203123Z", slug, "1h", "tpl_v1.png"]


@pytest.mark.parametrize("symbol", UNUSUAL_SYMBOLS)
def test_any_symbol_gives_a_safe_fixture_file_name(symbol: str) -> None:
    key = naming.fixture_key(symbol, "1h", "t" * 128)
    for name in (naming.success_fixture_name(key), naming.error_fixture_name(key, 422, "Invalid Symbol")):
        assert SAFE_FILE_NAME.fullmatch(name) and ".." not in name and len(name.encode()) <= 255, name
    symbol_part = key.split("__")[0]
    assert key == f"{symbol_part}__1h__{'t' * 128}"


NAMING_CONTRACT = Path(__file__).parents[3] / "contracts" / "charts_images_naming.md"


def contract_rows(columns: int) -> list[list[str]]:
    """The rows of the naming contract's tables with `columns` columns, backquotes dropped."""
    rows = []
    for line in NAMING_CONTRACT.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == columns:
            rows.append([cell.strip("`") for cell in cells])
    return rows


def test_the_naming_contract_examples() -> None:
    """contracts/charts_images_naming.md's tables are the oracle: every row, as it is written."""
    slugs, keys = contract_rows(2), contract_rows(4)
    assert len(slugs) == 6 and len(keys) == 6  # the tables were read
    for symbol, slug in slugs:
        assert naming.symbol_slug(symbol) == slug, symbol
    for symbol, timeframe, template, key in keys:
        assert naming.fixture_key(symbol, timeframe, template) == key, symbol
    # the naming rules' formula: its runs joined by `_`, then the cut (a `_` before the cut moves it)
    assert (
        naming.fixture_key(FORMULA, "1h", "t") == "NASDAQ_MARA_NASDAQ_RIOT_NASDAQ_WULF_NASD-5fc9975345__1h__t"
    )


def test_unusual_symbols_are_named_by_a_digest_so_none_share_a_name() -> None:
    assert naming.symbol_slug("CME_MINI:ES1!").startswith("CME-MINI-ES1-")
    assert naming.symbol_slug(FORMULA).startswith("NASDAQ-MARA-NASDAQ-RIOT-")
    assert naming.fixture_key("BMV:CEMEX/CPO", "1h", "t").startswith("BMV_CEMEX_CPO-")
    symbols = ["(A:X+A:Y)/2", "(A:X-A:Y)/2", "(A:X*A:Y)/2", "A:X/A:Y/2", "CME:ES1!", "CME:ES1"]
    assert len({naming.symbol_slug(s) for s in symbols}) == len(symbols)
    assert len({naming.fixture_key(s, "1h", "t") for s in symbols}) == len(symbols)
    assert naming.symbol_slug(FORMULA) == naming.symbol_slug(FORMULA)  # deterministic


def test_png_and_manifest_paths() -> None:
    path = naming.png_object_path("run1", "charts_1h", MOMENT, "BINANCE:BTCUSDT", "1h", "price_psar_adi_v1")
    assert path == "charts/run1/charts_1h/20261122T041203123Z_BINANCE-BTCUSDT_1h_price_psar_adi_v1.png"
    assert naming.manifest_object_path("run1", "charts_1h") == "charts/run1/charts_1h/manifest.json"
    assert naming.gcs_uri("bkt", path) == f"gs://bkt/{path}"


@pytest.mark.parametrize(
    "bad", ["..", "../etc", "a/b", "", " run", "run id", "a..b", "-lead", "x" * 129, "ü", None, 7]
)
def test_unsafe_segments_are_rejected(bad: object) -> None:
    assert not naming.is_safe_segment(bad)
    if isinstance(bad, str):
        with pytest.raises(ValueError, match="not a safe path segment"):
            naming.manifest_object_path(bad, "step")
        with pytest.raises(ValueError, match="not a safe path segment"):
            naming.manifest_object_path("run", bad)


def test_fixture_names() -> None:
    key = naming.fixture_key("BINANCE:BTCUSDT", "1h", "price_psar_adi_v1")
    assert key == "BINANCE_BTCUSDT__1h__price_psar_adi_v1"
    assert naming.fixture_key("BYBIT:BTCUSDT.P", "4h", "t") == "BYBIT_BTCUSDT.P__4h__t"
    assert naming.success_fixture_name(key) == f"{key}.png"
    name = naming.error_fixture_name(key, 429, "Limit Exceeded")
    assert name == f"{key}__429_LIMIT_EXCEEDED.json"
    match = naming.ERROR_FIXTURE_NAME.fullmatch(name)
    assert match and match.group("key") == key and match.group("status") == "429"


# --- a PNG name read back (core/step/reuse.py lists a step's folder) ---------------------------


@pytest.mark.parametrize("symbol", ["BINANCE:BTCUSDT", "BYBIT:BTCUSDT.P", *UNUSUAL_SYMBOLS])
@pytest.mark.parametrize("timeframe", ["1m", "45m", "12h", "1D", "1W", "3M", "1Y"])
def test_a_png_path_reads_back_into_the_parts_it_was_written_from(symbol: str, timeframe: str) -> None:
    moment = datetime(2026, 11, 23, 9, 8, 7, 654321, tzinfo=UTC)
    path = naming.png_object_path("run-1.a", "step_1", moment, symbol, timeframe, "tpl_v1.b-c")
    parsed = naming.parse_png_object_path(path)
    assert parsed == naming.PngName(
        "run-1.a",
        "step_1",
        moment.replace(microsecond=654000),
        naming.symbol_slug(symbol),
        timeframe,
        "tpl_v1.b-c",
    )


def test_the_compact_moment_reads_back_to_the_millisecond() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    assert naming.parse_compact_utc(naming.compact_utc(moment)) == moment
    for bad in ("20260102T030405006", "20260102T030405Z", "2026-01-02T03:04:05.006Z", "20261302T030405006Z"):
        with pytest.raises(ValueError):
            naming.parse_compact_utc(bad)


@pytest.mark.parametrize(
    "moment",
    [
        "\u0662\u0660\u0662\u0666\u0660\u0661\u0660\u0662T030405006Z",  # an Arabic-Indic date
        "20260102T\uff10\uff13\uff10\uff14\uff10\uff15006Z",  # a full-width time
    ],
)
def test_a_compact_moment_holds_ascii_digits_only(moment: str) -> None:
    """A name read back from the bucket: int() would read these digits as 2026-01-02 03:04:05."""
    assert naming.parse_compact_utc("20260102T030405006Z") == datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    with pytest.raises(ValueError, match="is not a YYYYMMDDTHHMMSSmmmZ moment"):
        naming.parse_compact_utc(moment)
    with pytest.raises(ValueError, match="YYYYMMDDTHHMMSSmmmZ"):
        naming.parse_png_object_path(f"charts/run1/charts/{moment}_B-X_1h_t.png")


def test_an_error_fixture_name_holds_an_ascii_status_only() -> None:
    """A file name in the fixtures folder: `٤٢٢` would be read as a 422."""
    assert naming.ERROR_FIXTURE_NAME.fullmatch("K__1h__t__422_INVALID_SYMBOL.json")
    assert naming.ERROR_FIXTURE_NAME.fullmatch("K__1h__t__4\u0662\u0662_INVALID_SYMBOL.json") is None


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("charts/run1/charts/manifest.json", "is not a .png"),
        ("charts/run1/charts", "is not charts/<runId>/<stepId>/<name>"),
        ("other/run1/charts/20261123T115959000Z_B-X_1h_t.png", "is not charts/<runId>/<stepId>/<name>"),
        ("charts/run1/charts/a/20261123T115959000Z_B-X_1h_t.png", "is not charts/<runId>/<stepId>/<name>"),
        ("charts/run1/charts/20261123T115959000Z_B-X_1h.png", "four parts"),
        ("charts/run1/charts/20261123T115959000Z_b-x_1h_t.png", "symbolSlug 'b-x'"),
        ("charts/run1/charts/20261123T115959000Z_B..X_1h_t.png", "symbolSlug 'B..X'"),
        ("charts/run1/charts/20261123T115959000Z_B-X_hour_t.png", "timeframe 'hour'"),
        ("charts/run1/charts/20261123T115959000Z_B-X_1h_.png", "chartTemplateId ''"),
        ("charts/..%2F/charts/20261123T115959000Z_B-X_1h_t.png", "runId"),
        ("charts/run1/-x/20261123T115959000Z_B-X_1h_t.png", "stepId '-x'"),
        ("charts/run1/charts/2026_B-X_1h_t.png", "YYYYMMDDTHHMMSSmmmZ"),
    ],
)
def test_a_name_out_of_shape_is_refused_naming_the_part(path: str, named: str) -> None:
    with pytest.raises(ValueError) as refused:
        naming.parse_png_object_path(path)
    assert named in str(refused.value)


# --- each rule at its edge (mutation testing found these unchecked) -------------------------


def test_a_lease_document_id_is_forty_hex_digits() -> None:
    lease_id = naming.lease_document_id("run1", "charts")
    assert len(lease_id) == 40 and re.fullmatch(r"[0-9a-f]{40}", lease_id)
    assert lease_id != naming.lease_document_id("run1", "charts2")


def test_moments_are_named_in_utc_whatever_the_machines_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        tokyo = datetime(2026, 11, 24, 8, 30, 0, 1000, tzinfo=timezone(timedelta(hours=9)))
        assert naming.compact_utc(tokyo) == "20261123T233000001Z"
        assert naming.rfc3339_utc(tokyo) == "2026-11-23T23:30:00.001Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_plain_symbol_of_exactly_64_characters_keeps_its_name() -> None:
    symbol = "EX:" + "A" * 61
    assert naming.symbol_slug(symbol) == "EX-" + "A" * 61
    assert (
        naming.symbol_slug(symbol + "A").startswith("EX-" + "A" * 37)
        and len(naming.symbol_slug(symbol + "A")) == 51
    )


def test_a_digested_name_never_ends_its_readable_part_with_a_separator() -> None:
    symbol = "(" + "A" * 39 + "+B)/2"  # the cut at 40 characters falls on the '-' between A and B
    slug = naming.symbol_slug(symbol)
    assert re.fullmatch("A{39}-[0-9A-F]{10}", slug), slug
    assert naming.fixture_key(symbol, "1h", "t").startswith("A" * 39 + "-")


def test_a_symbol_without_letters_or_digits_is_unknown_and_x_is_a_letter_like_any_other() -> None:
    assert re.fullmatch("UNKNOWN-[0-9A-F]{10}", naming.symbol_slug(":::"))
    assert naming.symbol_slug("XETR:X!").startswith("XETR-X-")
    assert naming.fixture_key("(xau+x)/2", "1h", "t").startswith("xau_x_2-")


def test_a_plain_fixture_key_keeps_lower_case() -> None:
    assert naming.fixture_key("binance:btcusdt", "1h", "t") == "binance_btcusdt__1h__t"


def test_an_error_fixture_reason_is_upper_snake_case_without_edges() -> None:
    assert naming.error_fixture_name("k", 429, "  Limit exceeded! ") == "k__429_LIMIT_EXCEEDED.json"
    assert naming.error_fixture_name("k", 500, "!!!") == "k__500_ERROR.json"


def test_an_unsafe_id_is_refused_naming_exactly_which() -> None:
    with pytest.raises(ValueError) as run_refused:
        naming.step_prefix("../x", "charts")
    assert str(run_refused.value) == "runId '../x' is not a safe path segment"
    with pytest.raises(ValueError) as step_refused:
        naming.step_prefix("run1", "a/b")
    assert str(step_refused.value) == "stepId 'a/b' is not a safe path segment"
    with pytest.raises(ValueError) as template_refused:
        naming.png_object_path("run1", "charts", MOMENT, "BINANCE:BTCUSDT", "1h", "../t")
    assert str(template_refused.value) == "chartTemplateId '../t' is not a safe path segment"
    with pytest.raises(ValueError) as parse_refused:
        naming.parse_png_object_path("charts/-run/charts/20261123T115959000Z_B-X_1h_t.png")
    assert str(parse_refused.value).endswith(": runId '-run' is out of shape")


def test_an_x_at_either_end_of_a_name_is_kept() -> None:
    assert naming.symbol_slug("XETR:XAUUSDX") == "XETR-XAUUSDX"
    assert naming.fixture_key("X!", "1h", "t").startswith("X-")
    assert naming.error_fixture_name("k", 400, "XML error X") == "k__400_XML_ERROR_X.json"


def test_a_fixture_key_of_a_symbol_without_letters_or_digits_is_unknown() -> None:
    assert re.fullmatch("UNKNOWN-[0-9a-f]{10}__1h__t", naming.fixture_key(":::", "1h", "t"))
