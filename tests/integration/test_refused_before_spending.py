"""Issue 20, items 1 and 2: a template edited by hand in Firestore, or a symbol, that CHART-IMG
would refuse fails the step VALIDATION_FAILED before any unit is spent.

The real-mode step as production runs it: the run and the templates in the Firestore emulator,
the real ChartApi against the CHART-IMG stand-in (tests/harness/chart_img_server.py), a usage
store that counts every unit reserved. Each refused case: the step's error names the template
and the field, the stand-in saw no request, no unit was reserved. What the docs allow (their
studies, drawings, symbols and formula) reaches the stand-in, once, as written.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from harness.builders import chart_step_for, flow_run, load_templates
from harness.chart_img_server import ChartImgServer
from harness.logs import LogCapture
from worker_chart_export.adapters.chart_img.assembly import Seams
from worker_chart_export.adapters.firestore import FirestoreFlowRunStore, FirestoreTemplateSource
from worker_chart_export.adapters.local import LocalArtifactStore
from worker_chart_export.bootstrap import build_chart_api
from worker_chart_export.bundled import chart_img_docs as docs
from worker_chart_export.core.clock import SYSTEM_CLOCK
from worker_chart_export.core.limits import StepLimits
from worker_chart_export.service.execute import execute_step
from worker_chart_export.service.ports import Ports
from worker_chart_export.service.step_context import StepReport
from worker_chart_export.settings import Settings
from worker_chart_export.testing import InMemoryUsageStore

pytestmark = pytest.mark.emulators

LIMITS = StepLimits.within_request(request_timeout_seconds=120.0, finalize_budget_seconds=5)
FORMULA = "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10"
STORED_AS = "edited_v1"


@dataclass
class Stack:
    firestore: Any
    server: ChartImgServer
    usage: InMemoryUsageStore
    bucket_dir: Path
    logs: LogCapture

    def run(self, template: dict[str, Any], *, symbol: str = "BTCUSDT") -> tuple[StepReport, dict[str, Any]]:
        """One CHART_EXPORT step on `template`, stored in Firestore as chart_templates/edited_v1
        (as a hand edit in the console would leave it)."""
        self.firestore.collection("chart_templates").document(STORED_AS).set(template)
        doc = flow_run({"charts": chart_step_for([STORED_AS])}, symbol=symbol)
        self.firestore.collection("flow_runs").document(doc["runId"]).set(doc)
        api = build_chart_api(settings(self.server), self.usage, seams=Seams(clock=SYSTEM_CLOCK))
        ports = Ports(
            flow_runs=FirestoreFlowRunStore(self.firestore, clock=SYSTEM_CLOCK),
            templates=FirestoreTemplateSource(self.firestore, clock=SYSTEM_CLOCK),
            artifacts=LocalArtifactStore(self.bucket_dir, "bkt"),
            chart_api=api,
        )
        report = execute_step("run1", "charts", ports=ports, limits=LIMITS, clock=SYSTEM_CLOCK)
        step = self.firestore.collection("flow_runs").document("run1").get().to_dict()["steps"]["charts"]
        return report, step

    def units_reserved(self) -> int:
        return sum(int(d.get("usageToday", 0)) for d in self.usage.snapshot().values())


def settings(server: ChartImgServer) -> Settings:
    accounts = [{"id": "acc1", "apiKey": server.keys[0], "ratePerSecond": 50, "burst": 10}]
    return Settings(
        charts_api_mode="real",
        chart_img_base_url=server.base_url,
        chart_img_accounts_json=SecretStr(json.dumps(accounts)),
        chart_img_request_timeout_seconds=10.0,
    )


@pytest.fixture
def stack(
    firestore_client: Any, chart_img_server: ChartImgServer, log_capture: LogCapture, tmp_path: Path
) -> Iterator[Stack]:
    chart_img_server.add_account("acc1")
    yield Stack(firestore_client, chart_img_server, InMemoryUsageStore(), tmp_path / "gcs", log_capture)


def edited(**request_changes: Any) -> dict[str, Any]:
    """The bundled price_psar_adi_v1 as someone changed it in the Firestore console."""
    template = copy.deepcopy(load_templates()["price_psar_adi_v1"])
    template["id"] = "edited_v1"
    template["request"].update(request_changes)
    return template


def with_study(**study: Any) -> Callable[[], dict[str, Any]]:
    return lambda: edited(studies=[study])


# (what was changed, the field the error names, a piece of the message)
REFUSED_TEMPLATES = [
    (lambda: edited(format="jpeg"), "request.format", "'jpeg' must be 'png'"),
    (lambda: edited(theme="blue"), "request.theme", "'blue' must be one of light, dark"),
    (
        with_study(name="Parabolic SAR", inputs={"in_0": 0.02}),
        "request.studies[0].inputs",
        "(did you mean 'input'?)",
    ),
    (with_study(name="RSI"), "request.studies[0].name", "'RSI' is not a study CHART-IMG documents"),
    (
        with_study(name="Relative Strength Index", input={"lenght": 14}),
        "request.studies[0].input.lenght",
        "is not an input key of 'Relative Strength Index'",
    ),
    (
        with_study(name="Relative Strength Index", input={"length": 5000}),
        "request.studies[0].input.length",
        "5000 is above the documented maximum 2000",
    ),
    (
        with_study(name="Volume", override={"Volume.colour.0": "red"}),
        "request.studies[0].override['Volume.colour.0']",
        "is not an override key of 'Volume'",
    ),
    (
        lambda: edited(drawings=[{"name": "Circle", "input": {"price": 1}}]),
        "request.drawings[0].name",
        "'Circle' is not a drawing CHART-IMG documents",
    ),
    (
        lambda: edited(drawings=[{"name": "Horizontal Line", "input": {"prise": 1}}]),
        "request.drawings[0].input.prise",
        "is not an input key of 'Horizontal Line'",
    ),
    (lambda: edited(timezone="Mars/Olympus"), "request.timezone", "not in CHART-IMG's Supported Timezone"),
    (lambda: edited(range="2Y"), "request.range", "'2Y' is not a documented range preset"),
    (
        lambda: edited(range={"from": "2024-02-01T00:00:00Z", "to": "2024-01-01T00:00:00Z"}),
        "request.range.to",
        "must be after from",
    ),
    (lambda: edited(shiftLeft=0), "request.shiftLeft", "0 is below the documented minimum 1"),
    (lambda: edited(shiftRight=1001), "request.shiftRight", "1001 is above the documented maximum 1000"),
    (
        lambda: edited(override={"mainPaneHeight": 99}),
        "request.override.mainPaneHeight",
        "99 is below the documented minimum 100",
    ),
    (
        lambda: edited(override={"mainPaneHeight": 1801}),
        "request.override.mainPaneHeight",
        "1801 is above the documented maximum 1800",
    ),
    (lambda: edited(watermark="ACME"), "request.watermark", "not BASIC"),
    (lambda: edited(width=1920), "request.width", "1920 exceeds the BASIC plan's maximum 800"),
    (lambda: {**edited(), "chartImgSymbolTemplate": "BINANCE:{symbol"}, "chartImgSymbolTemplate", "{symbol}"),
    (lambda: {**edited(), "id": "other_v1"}, "id", "differs from the id it is stored as, 'edited_v1'"),
]


@pytest.mark.parametrize(("build", "field", "message"), REFUSED_TEMPLATES)
def test_a_template_chart_img_would_refuse_costs_nothing(
    stack: Stack, build: Callable[[], dict[str, Any]], field: str, message: str
) -> None:
    report, step = stack.run(build())

    assert_refused_for_nothing(stack, report, step, f"chart_templates/{STORED_AS}.{field}: ", message)


def assert_refused_for_nothing(
    stack: Stack, report: StepReport, step: dict[str, Any], prefix: str, message: str
) -> None:
    assert report.outcome == "FAILED" and report.error_code == "VALIDATION_FAILED", report
    error = step["error"]
    assert step["status"] == "FAILED" and error["code"] == "VALIDATION_FAILED"
    named = [p for p in error["details"]["problems"] if p.startswith(prefix)]
    assert len(named) == 1 and message in named[0], error["details"]["problems"]
    assert stack.server.count() == 0 and stack.units_reserved() == 0
    assert report.manifest_uri is None and not list(stack.bucket_dir.rglob("*"))
    [logged] = stack.logs.events("step inputs invalid")  # one JSON line: nothing raw gets in
    assert logged["error"] == error and all(c.isprintable() for c in stack.logs.text.replace("\n", ""))


def whole_symbol_template() -> dict[str, Any]:
    """The edited template as stored, its symbol all scope.symbol's (`{symbol}`, which names
    no exchange since scope.symbol may not: issue 38); each test sets the one it needs."""
    return {**edited(), "id": STORED_AS, "chartImgSymbolTemplate": "{symbol}"}


# (scope.symbol, its template, the piece of the problem)
NOT_A_FORMULA = "scope.symbol is the base symbol (e.g. BTCUSDT), not a formula"
REFUSED_SYMBOLS = [
    # issue 38: a formula as scope.symbol would be a chart of another price, labelled BTCUSDT
    ("BTCUSDT*2", "BINANCE:{symbol}", f"scope.symbol: 'BTCUSDT*2': '*' at 8: {NOT_A_FORMULA}"),
    ("BTCUSDT*0", "BINANCE:{symbol}", f"'*' at 8: {NOT_A_FORMULA}"),
    ("BTCUSDT-1000", "BINANCE:{symbol}", f"'-' at 8: {NOT_A_FORMULA}"),
    ("(NASDAQ:MARA+NASDAQ:RIOT", "{symbol}", f"'(' at 1: {NOT_A_FORMULA}"),
    (FORMULA, "{symbol}", "a formula belongs in the template's chartImgSymbolTemplate"),
    ("BINANCE:BTCUSDT", "{symbol}", "':' at 8: scope.symbol is the base symbol, without an exchange"),
    ("BTC٤", "BINANCE:{symbol}", "character U+0664 at 4 is not allowed (only A-Z 0-9 _ . !)"),
    # worker contract §4.1: the base symbol, without a slash (issue 26)
    ("BTC/USDT", "BINANCE:{symbol}", "'/' at 4: scope.symbol is the base symbol, without a slash"),
    ("CEMEX/CPO", "BMV:{symbol}", "'/' at 6: scope.symbol is the base symbol, without a slash"),
    ("../x", "BINANCE:{symbol}", "'/' at 3: scope.symbol is the base symbol, without a slash"),
    ("..X", "BINANCE:{symbol}", "'.' at 1 cannot start a symbol"),
    ("BTC\nUSDT", "BINANCE:{symbol}", "character U+000A at 4 is not allowed"),
    ("BTC\x00", "BINANCE:{symbol}", "character U+0000 at 4 is not allowed"),
    ("A" * 201, "BINANCE:{symbol}", "is 201 characters long, at most 200"),
    ("BTC USDT", "BINANCE:{symbol}", "character U+0020 at 4"),
]


@pytest.mark.parametrize(("symbol", "symbol_template", "problem"), REFUSED_SYMBOLS)
def test_a_symbol_outside_the_grammar_costs_nothing(
    stack: Stack, symbol: str, symbol_template: str, problem: str
) -> None:
    report, step = stack.run(
        {**whole_symbol_template(), "chartImgSymbolTemplate": symbol_template}, symbol=symbol
    )

    assert_refused_for_nothing(stack, report, step, "scope.symbol: ", problem)


def test_a_resolved_symbol_without_an_exchange_costs_nothing(stack: Stack) -> None:
    template = {**whole_symbol_template(), "chartImgSymbolTemplate": "NASDAQ:{symbol}+RIOT"}
    report, step = stack.run(template, symbol="MARA")

    prefix = f"chart_templates/{STORED_AS}.chartImgSymbolTemplate: "
    assert_refused_for_nothing(stack, report, step, prefix, "'RIOT' at 13 has no exchange")


# (scope.symbol, its template, the symbol CHART-IMG must receive)
DOCUMENTED_SYMBOLS = [
    ("ES1!", "CME_MINI:{symbol}", "CME_MINI:ES1!"),
    ("BTCUSDT", "BYBIT:{symbol}.P", "BYBIT:BTCUSDT.P"),
    ("1000PEPEUSDT", "BINANCE:{symbol}.P", "BINANCE:1000PEPEUSDT.P"),
    ("FONE.DB.C", "CSE:{symbol}", "CSE:FONE.DB.C"),
    # an exchange, a slash, a formula: in the template (contract §4.1, issue 38)
    ("CEMEX", "BMV:{symbol}/CPO", "BMV:CEMEX/CPO"),
    ("MARA", "(NASDAQ:{symbol}+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10", FORMULA),
    ("BTCUSDT", "BINANCE:{symbol}*2", "BINANCE:BTCUSDT*2"),
]
SAFE_PNG_NAME = re.compile(r"\d{8}T\d{9}Z_[A-Z0-9.-]+_1h_edited_v1\.png")


@pytest.mark.parametrize(("symbol", "symbol_template", "sent"), DOCUMENTED_SYMBOLS)
def test_what_the_docs_show_reaches_chart_img_once_as_written(
    stack: Stack, symbol: str, symbol_template: str, sent: str
) -> None:
    report, step = stack.run(
        {**whole_symbol_template(), "chartImgSymbolTemplate": symbol_template}, symbol=symbol
    )

    assert report.outcome == "SUCCEEDED" and step["status"] == "SUCCEEDED", step.get("error")
    assert [r.symbol for r in stack.server.requests] == [sent] and stack.units_reserved() == 1
    [png] = [p for p in stack.bucket_dir.rglob("*.png")]
    assert png.parent == stack.bucket_dir / "bkt" / "charts" / "run1" / "charts"
    assert SAFE_PNG_NAME.fullmatch(png.name), png.name
    manifest = json.loads((png.parent / "manifest.json").read_text())
    assert manifest["symbol"] == symbol and manifest["items"][0]["meta"]["chartImgSymbol"] == sent


def test_a_template_within_the_docs_is_sent(stack: Stack) -> None:
    """The control for the refusals above: what the docs list is rendered, once."""
    example = docs.studies()["MACD"].example
    study = {key: dict(value) if isinstance(value, Mapping) else value for key, value in example.items()}
    report, step = stack.run(
        edited(
            studies=[study, {"name": "Volume", "forceOverlay": True}],
            drawings=[{"name": "Horizontal Line", "input": {"price": 100}, "zOrder": "top"}],
            timezone="America/New_York",
            range="1M",
            shiftRight=10,
            override={"mainPaneHeight": 400, "showLegend": False},
        )
    )
    assert report.outcome == "SUCCEEDED", step.get("error")
    assert stack.server.count() == 1 and stack.units_reserved() == 1
