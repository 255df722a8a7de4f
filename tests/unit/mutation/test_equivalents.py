"""Every mutant scripts/mutation_equivalents.txt lists as equivalent, shown to be: each entry
names one check below (`check: test_...`), which applies the entry's changed lines to the
function (mutants.py) and compares the mutant with the code over the inputs that matter,
exhaustively where the domain is small, else with hypothesis. A listed mutant that behaves
otherwise fails its check; an entry without a check, or whose lines are no longer in the
code, fails the first tests here.

(Not run by mutmut, which rewrites the modules these checks read: pyproject's
[tool.mutmut] leaves this folder out.)
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import combinations, product
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from harness.builders import chart_step, flow_run, load_templates
from unit.mutation import (  # noqa: F401  (their checks)
    test_core_equivalents,
    test_finalize_equivalents,
    test_redaction_equivalents,
    test_service_equivalents,
)
from unit.mutation.mutants import (
    CHECKS,
    ENTRIES,
    Equivalent,
    applied,
    assert_same,
    build_mutant,
    checks,
    late,
)
from worker_chart_export.adapters.chart_img import account_views
from worker_chart_export.adapters.chart_img.accounts_config import AccountConfig
from worker_chart_export.adapters.firestore import run_documents
from worker_chart_export.adapters.firestore.client import Version
from worker_chart_export.bundled import chart_img_docs as docs
from worker_chart_export.bundled.chart_img_docs import Parameter
from worker_chart_export.core import clock, naming
from worker_chart_export.core.budget import Budget
from worker_chart_export.core.chart_img import account_status, usage
from worker_chart_export.core.chart_img.account_status import ConfiguredAccount, LimitSource
from worker_chart_export.core.chart_img.plans import PLANS, AccountLimits, AccountPlans
from worker_chart_export.core.chart_img.usage import Pacing
from worker_chart_export.core.error_codes import ErrorCode
from worker_chart_export.core.step import manifest, step_rules, success, validation
from worker_chart_export.core.templates import documented_rules, symbols, template_check, template_rules
from worker_chart_export.core.templates.template_check import StoredTemplate
from worker_chart_export.testing import FakeClock

BASIC = PLANS["BASIC"]
NOW = datetime(2026, 11, 23, 18, 30, tzinfo=UTC)
TODAY, YESTERDAY = "2026-11-23T00:00:00Z", "2026-11-22T00:00:00Z"
MANY = settings(max_examples=300, deadline=None)
# every kind of value a document field may hold, and the integers around the edges
ANY_VALUES = [None, True, False, -2, -1, 0, 1, 2, 3, 44, 10**20, -0.0, 0.0, 1.0, 2.5, "1", "", [], {}]
# symbol-like text: the grammar's characters, and its pieces (words of one or more characters,
# names with '/', '.', '!', exchanges, numbers, operators, parentheses) in any order
SYMBOL_WORDS = ["A", "B", "1", "AB", "B1", "_", "2.5", "NASDAQ:", "MARA"]
SYMBOL_PIECES = [*SYMBOL_WORDS, ":", ".", "!", "/", "+", "-", "*", "(", ")"]
SYMBOL_TEXT = st.text(alphabet="AB1_.!:/+-*()", max_size=16) | st.lists(
    st.sampled_from(SYMBOL_PIECES), max_size=10
).map("".join)
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities too: JSON has neither
    | st.text(st.characters(exclude_categories=()))  # any code point, lone surrogates too
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


# --- the list ---------------------------------------------------------------------------------


def test_every_entry_names_a_check_and_every_check_has_an_entry() -> None:
    assert len(ENTRIES) >= 30  # the file was read
    assert [str(e) for e in ENTRIES if e.check not in CHECKS] == []
    assert [name for name in CHECKS if not any(e.check == name for e in ENTRIES)] == []


@pytest.mark.parametrize("entry", ENTRIES, ids=str)
def test_every_entry_still_applies_to_its_function(entry: Equivalent) -> None:
    assert build_mutant(entry) is not None  # its lines are in the function, once each


def test_a_mutant_that_behaves_otherwise_fails_its_check() -> None:
    """The machinery can fail: the same line with `>= 2` changes what attempt 1 gives."""
    line = "return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= {} else 0"  # noqa: E501
    wrong = Equivalent(
        "worker_chart_export.core.step.step_rules.attempt_of",
        (f"- {line.format(0)}", f"+ {line.format(2)}"),
        "not equivalent",
        "none",
        0,
    )
    assert_same(wrong, late(step_rules, "attempt_of", {"attempt": 0}))  # same for 0
    with pytest.raises(AssertionError, match="changes what"):
        assert_same(wrong, late(step_rules, "attempt_of", {"attempt": 1}))
    assert step_rules.attempt_of({"attempt": 1}) == 1  # the original is back


# --- small domains, exhaustively --------------------------------------------------------------


@checks
def test_attempt_of_is_the_same_for_every_kind_of_value(entry: Equivalent) -> None:
    assert_same(entry, late(step_rules, "attempt_of", {}))
    for value in ANY_VALUES:
        assert_same(entry, late(step_rules, "attempt_of", {"attempt": value}))


@checks
def test_the_limit_of_an_account_is_the_same_for_every_document_limit(entry: Equivalent) -> None:
    account = ConfiguredAccount("acc1", "BASIC", AccountLimits(50, 1.0, 3), LimitSource.PLAN, None)
    for limit, configured in product(ANY_VALUES, [account, None]):
        doc = {"usageToday": 3, "windowStart": TODAY, "dailyLimit": limit}
        assert_same(entry, late(account_status, "_limit", doc, configured))
        assert_same(entry, late(account_status, "_limit", {}, configured))


@checks
def test_the_real_clock_sleeps_alike_but_for_a_call_to_sleep_0(
    entry: Equivalent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant calls time.sleep(0) where the code does not call it: that is all it does
    differently, and time.sleep(0) only gives the processor away."""
    calls: list[float] = []
    monkeypatch.setattr(clock.time, "sleep", calls.append)
    mutant_only: list[float] = []
    for seconds in (-1.0, -0.0, 0, 0.0, 1e-9, 0.5, 3):
        del calls[:]
        assert clock.SystemClock().sleep(seconds) is None
        by_code = list(calls)
        del calls[:]
        with applied(entry):
            assert clock.SystemClock().sleep(seconds) is None
        assert [s for s in calls if s != 0] == by_code and set(calls) - set(by_code) <= {0}
        mutant_only += [s for s in calls if s not in by_code]
    # the difference the entry names, and no other: a sleep(0) for each of -0.0, 0 and 0.0
    assert mutant_only == [0, 0, 0]


@checks
def test_validation_is_the_same_for_every_kind_of_symbol_timeframe_and_min_images(entry: Equivalent) -> None:
    """The assert narrows types once no problem was found: every kind of each input."""
    templates = {t: StoredTemplate(t, d) for t, d in load_templates().items()}
    for symbol, timeframe, min_images in product(
        ["BTCUSDT", None, 5, "bad symbol"], ["1h", None, 3, "7x"], [2, 0, None, True, "1", -1, 99]
    ):
        step = chart_step(timeframe=timeframe)
        step["inputs"]["minImages"] = min_images
        doc = flow_run({"charts": step}, symbol=symbol)
        call = late(validation, "validate_step", doc, "run1", "charts", templates, default_timezone="Etc/UTC")
        assert_same(entry, call)


@checks
def test_the_views_catch_up_alike_whatever_falsy_value_marks_them_current(entry: Equivalent) -> None:
    """Every read of `_behind` is `not self._behind`, where None is False; and over any
    sequence of falling behind and catching up the views answer the same."""
    tree = ast.parse(inspect.getsource(account_views))
    reads = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "_behind" and isinstance(node.ctx, ast.Load)
    ]
    negated = [
        node.operand
        for node in ast.walk(tree)
        if isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.Not)
        and isinstance(node.operand, ast.Attribute)
    ]
    assert reads and all(read in negated for read in reads)
    for steps in product(["behind", "catch_up"], repeat=4):
        assert_same(entry, partial(catch_up_answers, steps))


def catch_up_answers(steps: tuple[str, ...]) -> list[list[str] | None]:
    configs = [AccountConfig(id=a, apiKey=SecretStr(f"test-key-{a}" + "0" * 24)) for a in ("a", "b")]
    views = account_views.AccountViews(configs, defaults=AccountLimits(44, 1.0, 3), clock=FakeClock(NOW))
    answers: list[list[str] | None] = [views.catch_up_ids()]
    for step in steps:
        if step == "behind":
            views.fell_behind()
        else:
            answers.append(views.catch_up_ids())
    return answers


# --- wider domains, with hypothesis -----------------------------------------------------------


@checks
@MANY
@given(text=st.text(st.characters(exclude_categories=())) | SYMBOL_TEXT)
@example(text="\ud800")  # a lone surrogate: surrogatepass
def test_names_are_the_same_for_any_text(entry: Equivalent, text: str) -> None:
    assert_same(entry, late(naming, "symbol_slug", "CME_MINI:ES1!"))  # one that is digested
    assert_same(entry, late(naming, "symbol_slug", text), reaches=False)
    assert_same(entry, late(naming, "fixture_key", text, "1h", "t"), reaches=False)


@checks
@MANY
@given(symbol=st.from_regex(naming._PLAIN_SYMBOL, fullmatch=True) | st.text())
def test_the_slug_of_a_plain_symbol_is_the_same(entry: Equivalent, symbol: str) -> None:
    assert_same(entry, late(naming, "symbol_slug", symbol))


@checks
@MANY
@given(codes=st.lists(st.sampled_from(list(ErrorCode)), max_size=8), items=st.integers(0, 9))
def test_the_failure_of_too_few_images_is_the_same_for_any_failures(
    entry: Equivalent, codes: list[ErrorCode], items: int
) -> None:
    assert_same(entry, late(success, "insufficient_images_error", items, 5, items + len(codes), codes))


@checks
@MANY
@given(document=st.dictionaries(st.text(max_size=5), JSON, max_size=4))
@example(document={"kind": "ü €", "n": float("nan")})
def test_the_manifest_bytes_are_the_same_for_any_document(
    entry: Equivalent, document: dict[str, Any]
) -> None:
    assert_same(entry, late(manifest, "manifest_bytes", document))


@checks
@MANY
@given(value=JSON | st.binary() | st.sets(st.integers(), max_size=2))
@example(value=[float("inf")])
def test_plain_json_is_told_apart_alike_for_any_value(entry: Equivalent, value: Any) -> None:
    module = validation if entry.function.startswith(validation.__name__) else template_check
    assert_same(entry, late(module, "_is_plain_json", value))


@checks
def test_the_symbol_grammar_says_the_same_of_any_text(entry: Equivalent) -> None:
    """Accepted or refused, and the words of the refusal, with and without an exchange; as
    scope.symbol, and in a template around {symbol}."""
    formula = "(NASDAQ:MARA+RIOT)/2"  # one that reaches each: scanned, parsed, in a scope and a template
    assert_same(entry, partial(every, [partial(scope_symbol, formula), *calls_on(formula)]))
    # the template read once: the rules only read it (a Mapping); each text gets a shallow copy
    any_text_is_judged_the_same(entry, load_templates()["price_psar_adi_v1"])


@settings(max_examples=1000, deadline=None)
@given(text=SYMBOL_TEXT | st.sampled_from(["BTCUSDT", "CME_MINI:ES1!", "(NASDAQ:MARA+NASDAQ:RIOT)/2"]))
@example(text="(NASDAQ:MARA+RIOT)/2")
@example(text="ES1!X")
def any_text_is_judged_the_same(entry: Equivalent, base: dict[str, Any], text: str) -> None:
    template = {**base, "chartImgSymbolTemplate": f"{text}{{symbol}}"}
    calls = [late(symbols, "symbol_problem", text, require_exchange=need) for need in (False, True)]
    calls += [partial(scope_symbol, text), late(template_rules, "rule_problems", template, BASIC)]
    template = {**template, "chartImgSymbolTemplate": f"{{symbol}}{text}"}
    calls += [late(template_rules, "rule_problems", template, BASIC)]
    for call in calls:
        assert_same(entry, call, reaches=False)  # a text refused early never reaches some


def every(calls: list[Callable[[], Any]]) -> list[Any]:
    return [call() for call in calls]


def calls_on(symbol: str) -> list[Callable[[], Any]]:
    template = {**load_templates()["price_psar_adi_v1"], "chartImgSymbolTemplate": "{symbol}"}
    return [
        late(symbols, "symbol_problem", symbol, require_exchange=True),
        late(template_rules, "rule_problems", template, BASIC),
    ]


def scope_symbol(symbol: Any) -> tuple[str | None, list[str]]:
    problems: list[str] = []
    return validation._symbol({"scope": {"symbol": symbol}}, problems), problems


DOCUMENTED_TYPES = sorted(
    {
        p.type
        for items in (docs.studies(), docs.drawings())
        for item in items.values()
        for p in (*item.input.values(), *item.override.values())
    }
    | set(documented_rules._TYPE_WORDS)
)


@checks
@MANY
@given(
    value=JSON | st.datetimes().map(lambda d: d.isoformat() + "Z"),
    documented_type=st.sampled_from(DOCUMENTED_TYPES) | st.text(max_size=8),
)
def test_a_values_problem_is_the_same_for_any_value_and_documented_type(
    entry: Equivalent, value: Any, documented_type: str
) -> None:
    spec = docs.Parameter("p", documented_type, minimum=0, maximum=10)
    assert_same(entry, late(documented_rules, "value_problem", value, spec))


@checks
@MANY
@given(
    given_text=st.text(alphabet="abcE/_ ", max_size=8) | st.integers(),
    known=st.lists(st.text(alphabet="abcE/_ ", max_size=8), max_size=6),
)
@example(given_text="Europe/Londn", known=sorted(docs.timezones()))
@example(given_text="aab", known=["aaa", "aab", "abb"])
def test_the_suggestion_is_the_same_for_any_text_and_list(
    entry: Equivalent, given_text: Any, known: list[str]
) -> None:
    assert_same(entry, late(documented_rules, "_did_you_mean", given_text, known))
    assert_same(entry, late(documented_rules, "_did_you_mean", given_text, dict.fromkeys(known)))


@checks
@MANY
@given(
    moment=st.datetimes(timezones=st.timezones()) | st.datetimes(),
    form=st.sampled_from(["iso", "z", "text", "epoch", "datetime"]),
    text=st.text(max_size=30),
)
def test_a_moment_reads_the_same_from_any_form(
    entry: Equivalent, moment: datetime, form: str, text: str
) -> None:
    value: Any = {
        "iso": moment.isoformat(),
        "z": moment.replace(tzinfo=None).isoformat() + "Z",
        "text": text,
        "epoch": moment.timestamp() if moment.tzinfo else 1e12,
        "datetime": moment,
    }[form]
    assert_same(entry, late(naming, "moment_of", value))


@checks
@MANY
@given(
    used=st.sampled_from([0, 1, 49, 50, 51, None, -1]),
    window=st.sampled_from([TODAY, YESTERDAY]),
    doc_limit=st.sampled_from([None, 0, 1, 50, 100, -1]),
    exhausted=st.sampled_from([None, "2026-11-24T00:00:00Z", "2026-11-23T00:00:00Z"]),
    configured_limit=st.sampled_from([None, 0, 1, 50]),
)
def test_an_accounts_row_is_the_same_for_any_usage_and_limit(
    entry: Equivalent, used: Any, window: str, doc_limit: Any, exhausted: Any, configured_limit: int | None
) -> None:
    doc = {"usageToday": used, "windowStart": window, "dailyLimit": doc_limit, "exhaustedUntil": exhausted}
    account = None
    if configured_limit is not None:
        limits = AccountLimits(configured_limit, 1.0, 3)
        account = ConfiguredAccount("acc1", "BASIC", limits, LimitSource.ACCOUNT, Pacing(0.9, 3, 0.3))
    assert_same(entry, late(account_status, "account_row", "acc1", doc, account, NOW))


@checks
@MANY
@given(
    known=st.none() | st.sampled_from([1000.0, 1000.5, 2000.0]),
    fresh=st.none() | st.sampled_from([999.0, 1000.0, 1000.5, 2000.0]) | st.booleans(),
)
def test_catching_up_leaves_the_same_pacing_state(entry: Equivalent, known: float | None, fresh: Any) -> None:
    assert_same(entry, partial(caught_up_tat, known, fresh))


def caught_up_tat(known: float | None, fresh: Any) -> float | None:
    config = AccountConfig(id="a", apiKey=SecretStr("test-key-a" + "0" * 24))
    views = account_views.AccountViews([config], defaults=AccountLimits(44, 1.0, 3), clock=FakeClock(NOW))
    views["a"].tat = known
    views.caught_up({"a": {"usageToday": 1, "windowStart": TODAY, "tat": fresh}})
    tat: float | None = views["a"].tat
    return tat


# --- templates: every combination of problems ------------------------------------------------


def _put(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(template: dict[str, Any]) -> None:
        target: Any = template
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit replaced what this one changes

    return edit


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda template: template.pop(key, None) and None


DRAWING = json.loads(json.dumps(docs.drawings()["Horizontal Line"].example, default=dict))
# Each a change that gives a template one problem: an extra key in every object of the schema
# that forbids them (root, request, a study, a drawing), the market set in request (its "not"),
# an id with '..' (safeId's "not"), a field missing, of the wrong type or out of bounds, and what
# only the rules see.
TEMPLATE_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "extra-root": _put(("colour",), "red"),
    "extra-request": _put(("request", "colour"), "red"),
    "extra-study": _put(("request", "studies", 0, "colour"), 1),
    "extra-drawing": _put(("request", "drawings"), [{**DRAWING, "colour": 1}]),
    "request-symbol": _put(("request", "symbol"), "BINANCE:ETHUSDT"),
    "request-interval": _put(("request", "interval"), "1h"),
    "id-dots": _put(("id",), "price..v1"),
    "id-missing": _drop("id"),
    "id-number": _put(("id",), 5),
    "description-empty": _put(("description",), ""),
    "symbol-no-placeholder": _put(("chartImgSymbolTemplate",), "BINANCE:BTC"),
    "symbol-grammar": _put(("chartImgSymbolTemplate",), "BINANCE::{symbol}"),
    "request-list": _put(("request",), [1]),
    "width": _put(("request", "width"), 5000),
    "study-unknown": _put(("request", "studies", 1, "name"), "Moving Averages"),
    "study-nameless": _put(("request", "studies", 0), {"input": {}}),
    "drawing-inputless": _put(("request", "drawings"), [{"name": "Horizontal Line"}]),
    "tags": _put(("tags",), ["a", "a"]),
    "version": _put(("version",), "x"),
    "range": _put(("request", "range"), 5),
}


def templates_with_edits() -> Iterator[dict[str, Any]]:
    base = load_templates()["price_psar_adi_v1"]
    for size in (0, 1, 2, 3):
        for names in combinations(TEMPLATE_EDITS, size):
            template = copy.deepcopy(base)
            for name in names:
                TEMPLATE_EDITS[name](template)
            yield template


@checks
def test_a_templates_problems_are_the_same_for_every_combination_of_three_problems(entry: Equivalent) -> None:
    """Against the bundled schema: every object that forbids extra keys defines its keys (so
    the `properties` default is never read), and its "not"s are request's, layout.request's,
    safeId's and the one that keeps request and layout apart."""
    from worker_chart_export.bundled.contracts import CHART_TEMPLATE, validator

    schema = validator(CHART_TEMPLATE).schema
    closed = [s for s in walk(schema) if s.get("additionalProperties") is False]
    assert len(closed) == 6 and all("properties" in s for s in closed)
    assert sum("not" in s for s in walk(schema)) == 4
    for template in templates_with_edits():
        assert_same(entry, late(template_check, "template_problems", template, BASIC))


def walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def test_the_template_edits_each_give_a_problem() -> None:
    """Else the combinations above would compare clean templates."""
    base = load_templates()["price_psar_adi_v1"]
    assert template_check.template_problems(base, BASIC) == []
    for name, edit in TEMPLATE_EDITS.items():
        template = copy.deepcopy(base)
        edit(template)
        assert template_check.template_problems(template, BASIC), name


# --- helper H2's entries (issue 26, issue 25 item 2) ------------------------------------------


@checks
def test_a_stored_count_reads_the_same_for_every_kind_of_value(entry: Equivalent) -> None:
    for value in ANY_VALUES:
        assert_same(entry, late(usage, "_count", value))


@checks
def test_a_base_symbol_is_judged_the_same_for_any_text(entry: Equivalent) -> None:
    texts = ["BTCUSDT", "BTC/USDT", "BINANCE:BTCUSDT", "ES1!", "(A+B)/2", "", " ", None, 5, "a b"]
    texts += ["RR.", "..", "ES1!X", "A" * 201, "BTCUSDT*2"]
    for text in texts:
        assert_same(entry, late(symbols, "base_symbol_problem", text))


@checks
def test_the_hint_of_a_choice_is_the_same_for_any_value(entry: Equivalent) -> None:
    """Over every documented parameter with a list of choices: its documented default, a
    number, and any text hypothesis draws (the same default and number are compared once, not
    again with each text)."""
    specs = [
        spec
        for item in [*docs.studies().values(), *docs.drawings().values()]
        for spec in [*item.input.values(), *item.override.values()]
        if spec.choices
    ]
    assert specs
    for spec in specs:
        for given_value in (spec.default, 7):
            assert_same(entry, late(documented_rules, "_choice_hint", given_value, spec), reaches=False)
    close = Parameter(name="p", type="String", default="column", choices=("columns", "colums", "column_s"))
    assert_same(entry, late(documented_rules, "_choice_hint", "column", close))
    any_text_gets_the_same_hint(entry, specs)


@MANY
@given(value=st.text(alphabet="abcdelmnorstu_", max_size=12) | st.sampled_from(["column", "columns", "Line"]))
def any_text_gets_the_same_hint(entry: Equivalent, specs: list[Parameter], value: str) -> None:
    assert_same(entry, late(documented_rules, "_choice_hint", value, specs[0]))
    for spec in specs:
        assert_same(entry, late(documented_rules, "_choice_hint", value, spec), reaches=False)


@checks
def test_a_template_no_configured_plan_allows_is_described_the_same(entry: Equivalent) -> None:
    """Every bundled template at sizes and parameter counts each plan's limits fall between,
    under every plan configured alone and with a second one: wherever the best configured
    plan has problems (the only case _unservable is called)."""
    sizes = [(800, 600), (1000, 600), (1920, 1080), (1920, 1600), (2048, 1920), (3000, 600)]
    counts = [1, 4, 6, 11, 26, 51]
    configured = [AccountPlans(plan) for plan in PLANS.values()] + [
        AccountPlans.of(PLANS["BASIC"], [("a", "BASIC"), ("b", plan)]) for plan in PLANS
    ]
    reached = 0
    for name, document in load_templates().items():
        for (width, height), count in product(sizes, counts):
            changed = copy.deepcopy(document)
            if "layout" in changed:  # a layout's own indicators are the layout's: its size alone
                changed["layout"].setdefault("request", {}).update(width=width, height=height)
            else:
                changed["request"].update(width=width, height=height)
                changed["request"]["studies"] = [{"name": "Volume"}] * count
            template = StoredTemplate(name, changed)
            for plans in configured:
                if template.problems(plans.best):
                    reached += 1
                    assert_same(entry, late(validation, "_unservable", "charts", template, plans))
    assert reached


@checks
def test_the_versions_remembered_are_the_same_for_any_writes(entry: Equivalent) -> None:
    """Every sequence of four remembers and forgets over three runs, at capacities 1 to 3:
    what is recalled of each run after each of them."""
    writes = [("remember", "a"), ("remember", "b"), ("remember", "c"), ("forget", "a")]
    for capacity in (1, 2, 3):
        for ops in product(writes, repeat=4):
            assert_same(entry, partial(recalled_after, capacity, ops), reaches=False)
    assert_same(entry, partial(recalled_after, 1, (("remember", "a"), ("remember", "b"))))  # one drops out


def recalled_after(capacity: int, ops: tuple[tuple[str, str], ...]) -> list[list[Any]]:
    written = run_documents.WrittenVersions(capacity)
    seen = []
    for n, (op, run_id) in enumerate(ops):
        if op == "remember":
            written.remember(run_id, Version({"n": n}, n))
        else:
            written.forget(run_id)
        seen.append([written.recall(r) for r in ("a", "b", "c")])
    return seen


@checks
def test_a_step_reads_the_same_from_a_raw_or_a_wrapped_document(entry: Equivalent) -> None:
    """Reading through proto-plus's wrappers is slower, not different: for raw and wrapped
    documents, with steps of every kind of value, a missing step and no steps at all."""
    from google.events.cloud.firestore import Document

    from worker_chart_export.functions.decoding import values
    from worker_chart_export.testing import build_document_event_data

    name = "projects/p/databases/(default)/documents/flow_runs/R"
    step = {"status": "READY", "n": 3, "x": 2.5, "ok": True, "none": None, "list": [1, "a"], "map": {}}
    for fields in ({"steps": {"s": step, "t": {}}}, {"steps": {}}, {"other": 1}):
        raw = build_document_event_data(name, fields).value
        for document in (raw, Document.wrap(raw)):
            for step_id in ("s", "t", "missing"):
                assert_same(entry, late(values, "step_to_python", document, step_id))


@checks
def test_the_server_error_page_is_wrapped_alike_whatever_falsy_default_is_read(entry: Equivalent) -> None:
    """`redacted` is read for its truth: a plain write_error (no attribute) is wrapped once,
    however often the server starts."""
    from gunicorn import util

    from worker_chart_export.functions import serve

    def starts(times: int) -> tuple[bool, ...]:
        original = util.write_error
        try:
            seen = []
            for _ in range(times):
                serve._redact_server_errors()
                seen.append(util.write_error is original)
            wrapped = util.write_error
            return (*seen, getattr(wrapped, "redacted", False))
        finally:
            util.write_error = original

    for times in (1, 2, 3):
        assert_same(entry, partial(starts, times))


@checks
def test_a_payload_starting_with_a_brace_splits_alike(entry: Equivalent) -> None:
    """JSON text that starts with `{` parses to an object or not at all: the "not an object"
    branch never runs, whatever its words."""
    from worker_chart_export.functions.decoding import payload

    samples = ["{", "{}", '{"value": {"name": "n"}}', '{"a": [1, 2]}', "{[1]}", '{"a": 1} trailing', " {} "]
    for text in samples:
        assert_same(entry, late(payload, "split_event_payload", text), reaches=text.strip().startswith("{"))
        assert_same(entry, late(payload, "split_event_payload", text.encode()), reaches=False)
    check_any_brace_text(entry)


@given(st.text(max_size=40).map(lambda rest: "{" + rest))
@MANY
def check_any_brace_text(entry: Equivalent, text: str) -> None:
    from worker_chart_export.functions.decoding import payload

    assert_same(entry, late(payload, "split_event_payload", text))


@checks
def test_a_listening_problem_is_found_alike(entry: Equivalent) -> None:
    """SO_REUSEADDR is on for any non-zero value, protocol 0 is TCP for a stream socket, and
    AI_PASSIVE changes nothing for a host given as text: the same verdict on a free port, a
    port in use, another machine's address, a name and the default host."""
    import socket as sockets

    from worker_chart_export.functions import serve

    with sockets.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        with sockets.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            free = holder.getsockname()[1]
        hosts = (("127.0.0.1", free), ("127.0.0.1", busy), ("192.0.2.1", 8080), ("::1", busy))
        for host, port in (*hosts, ("localhost", busy), ("0.0.0.0", free)):
            assert_same(entry, late(serve, "listen_problem", host, port))


@checks
def test_a_status_line_gives_the_same_code(entry: Equivalent) -> None:
    """PEP 3333's status is a three-digit code, one space, a reason phrase: the code is what
    precedes the first space however the line is split; a line without a code is a 500."""
    check_any_status_line(entry)
    for line in ("200 OK", "503 SERVICE UNAVAILABLE", "404 Not\\tFound here", "abc", "20 x", "204 "):
        assert_same(entry, partial(logged_status, line), reaches=False)


@given(st.integers(100, 599), st.text(max_size=20).filter(lambda reason: reason.strip() == reason))
@MANY
def check_any_status_line(entry: Equivalent, code: int, reason: str) -> None:
    assert_same(entry, partial(logged_status, f"{code} {reason}" if reason else f"{code} OK"))


def logged_status(status_line: str) -> tuple[str, int]:
    from worker_chart_export.functions import serve

    lines: list[tuple[str, int]] = []

    class Recorder:
        def __getattr__(self, method: str) -> Callable[..., None]:
            return lambda message, httpStatus, **_: lines.append((method, httpStatus))

    original = serve._logger
    serve._logger = Recorder  # type: ignore[assignment]
    try:
        serve._log_answer({}, status_line)
    finally:
        serve._logger = original  # type: ignore[assignment]
    return lines[0]


@checks
def test_each_served_function_answers_alike_whatever_signature_create_function_app_names(
    entry: Equivalent,
) -> None:
    """main.py's decorators register each function's signature with functions-framework,
    which reads it when none is named: every target answers a GET, a garbage POST and an empty
    POST the same."""
    from functions_framework import _function_registry

    from worker_chart_export.functions import main, serve

    def answers(target: str) -> list[int]:
        app = serve.create_function_app(target)
        client = app.test_client()
        return [
            client.get("/").status_code,
            client.post("/", data=b"\xff\x00", headers={"content-type": "application/json"}).status_code,
            client.put("/").status_code,
        ]

    loaded = _function_registry.load_function_module
    served = SimpleNamespace(loader=SimpleNamespace(exec_module=lambda module: None))
    _function_registry.load_function_module = lambda source: (main, served)  # the imported module
    try:
        for target in serve.SIGNATURES:
            assert_same(entry, partial(answers, target))
    finally:
        _function_registry.load_function_module = loaded


@checks
def test_recording_an_answer_is_the_same_for_any_answer(entry: Equivalent, tmp_path: Path) -> None:
    """A 200's body is read by nothing but `classify`, which calls any 200 a success; a
    fixture's reason is upper-cased into its name: what is recorded and returned is the same
    for a chart, answers about the request with and without words, and transient ones."""
    from harness.chart_img_server import PNG, chart_call
    from worker_chart_export.adapters.chart_img.http import HttpAnswer
    from worker_chart_export.adapters.chart_img.record import RecordSession
    from worker_chart_export.adapters.chart_img.session import RenderedCall
    from worker_chart_export.adapters.fixtures import FixtureLibrary
    from worker_chart_export.core.error_codes import StepError
    from worker_chart_export.core.types import ChartFailure, ChartSuccess

    answers = [
        HttpAnswer(200, PNG, "image/png"),
        HttpAnswer(422, b"{}", "application/json"),
        HttpAnswer(422, b'{"message": "Invalid Symbol"}', "application/json"),
        HttpAnswer(400, b"bad request", "text/plain"),
        HttpAnswer(429, b'{"message": "Limit Exceeded"}', "application/json"),
        HttpAnswer(503, b"", "text/plain"),
    ]

    class Real:
        def __init__(self, answer: HttpAnswer) -> None:
            self.answer = answer

        def render_with_answer(self, call: Any) -> RenderedCall:
            if self.answer.status == 200:
                return RenderedCall(ChartSuccess(self.answer.content, "acc1"), self.answer)
            return RenderedCall(ChartFailure(StepError(ErrorCode.CHART_API_FAILED, "refused")), self.answer)

    def record(answer: HttpAnswer) -> tuple[Any, list[str]]:
        folder = Path(tempfile.mkdtemp(dir=tmp_path))  # a library of its own each time
        result = RecordSession(FixtureLibrary(folder), Real(answer)).render(chart_call("tpl"))  # type: ignore[arg-type]
        return result, sorted(p.name for p in folder.rglob("*") if p.is_file())

    for answer in answers:
        assert_same(entry, partial(record, answer))


@checks
def test_a_redacted_answer_is_the_same_whether_or_not_it_is_copied(entry: Equivalent) -> None:
    """An answer with nothing to redact, copied or not, is equal field for field (it is
    frozen: nothing can tell the copy apart but `is`); one with a key is redacted alike."""
    from worker_chart_export.adapters.chart_img.http import HttpAnswer
    from worker_chart_export.core.redaction import Redaction

    key = "sk_check_redaction_0123456789abcdef"
    for content in (b"", b'{"message": "Forbidden"}', f'{{"message": "bad key {key}"}}'.encode(), b"\x89PNG"):
        for keys in (frozenset(), frozenset({key})):
            answer = HttpAnswer(403, content, "application/json", retry_after=1.5)
            assert_same(entry, late(answer, "redacted", Redaction(keys)))


@checks
def test_a_first_wave_is_prepaid_alike_however_its_leases_are_zipped(
    entry: Equivalent, tmp_path: Path
) -> None:
    """acquire_many answers one lease (or None) per call of the wave, aligned with it: zipping
    strictly or not pairs the same calls with the same leases, for waves of 1 to 4 calls on
    one or two accounts, with some days' quota left or none."""
    from harness.chart_img_server import chart_call
    from harness.logs import LogCapture
    from unit.adapters.chart_img.scripted import make_rig, png

    def prepaid(accounts: tuple[str, ...], size: int, daily_limit: int) -> list[tuple[str, str]]:
        r = make_rig([png()], LogCapture(), tmp_path, accounts=accounts, chart_img_daily_limit=daily_limit)
        wave = [chart_call(f"tpl_{i}") for i in range(size)]
        with r.api.for_step(wave, r.budget()) as step:
            return sorted((key[2], lease.account_id) for key, lease in step.prepaid.items())

    for accounts, size, limit in product((("acc1",), ("acc1", "acc2")), (1, 2, 4), (1, 3, 50)):
        assert_same(entry, partial(prepaid, accounts, size, limit))


@checks
def test_the_exchanges_with_chart_img_end_alike(entry: Equivalent, tmp_path: Path) -> None:
    """httpx upper-cases a method and matches header names in any case; a timeout's own words
    and request are read by nobody (a failure names the exception's type); a 200's body is
    never read; FINAL is handled as None; tenacity reads `reraise` only without an error
    callback, and calls that callback with an outcome; httpx follows no redirect unless told
    (None is falsy); the assembly always names the mode: every kind of exchange (a redirect,
    a bug in an attempt and retries run out included) ends the same, as the chart API reports
    it, with the same requests sent and waits made."""
    from email.utils import format_datetime

    import httpx

    from harness.chart_img_server import PNG
    from harness.logs import LogCapture
    from unit.adapters.chart_img.scripted import make_rig

    PNG_TYPE, TOO_MANY = {"content-type": "image/png"}, {"message": "Too Many Requests"}
    ACCOUNTS = ("acc1", "acc2")

    def trickle(clock: Any, seconds: float) -> Iterator[bytes]:
        for part in (PNG[:5], PNG[5:]):
            clock.advance(seconds)
            yield part

    def exchange(kind: str) -> tuple[Any, ...]:
        r = make_rig([], LogCapture(), tmp_path, accounts=ACCOUNTS, chart_img_request_timeout_seconds=4.0)
        later = format_datetime(r.clock.now() + timedelta(seconds=3), usegmt=True)
        answers = {
            "png": [httpx.Response(200, content=PNG, headers=PNG_TYPE)],
            "chunks": [httpx.Response(200, content=iter([PNG[:5], PNG[5:]]), headers=PNG_TYPE)],
            "edge": [httpx.Response(200, content=trickle(r.clock, 2.0))],
            "trickle": [httpx.Response(200, content=trickle(r.clock, 2.5))],
            "untyped": [httpx.Response(200, content=b"<html/>")],
            "refused": [httpx.Response(422, json={"message": "Invalid Symbol"})],
            "dated": [httpx.Response(429, json=TOO_MANY, headers={"Retry-After": later})],
            "seconds": [httpx.Response(429, json=TOO_MANY, headers={"retry-after": "2"})],
            "5xx": [httpx.Response(500, json={"message": "Something Went Wrong"})] * 3,
            "redirect": [httpx.Response(302, headers={"location": "https://elsewhere.test/"})] * 3,
            "bug": [RuntimeError("a bug in the attempt")],
        }[kind]
        r.transport.answers = [*answers, httpx.Response(200, content=PNG, headers=PNG_TYPE)]
        result = r.render()
        sent = [(q.method, q.headers.get("x-api-key") is not None, q.url.path) for q in r.transport.seen]
        return result, sent, [s for s in r.clock.sleeps if s]

    kinds = (
        "png",
        "chunks",
        "edge",
        "trickle",
        "untyped",
        "refused",
        "dated",
        "seconds",
        "5xx",
        "redirect",
        "bug",
    )
    for kind in kinds:
        assert_same(entry, partial(exchange, kind))


@checks
def test_events_and_documents_decode_alike(entry: Equivalent) -> None:
    """A string falls through to `getattr(raw, kind)` when not checked first; the READY and
    CHART_EXPORT filters before the summaries only spare work (the summaries are judged again); an update
    always carries its document's bytes: every kind of value, and events with every mix of
    steps, decode the same."""
    from google.protobuf import json_format

    from unit.functions.decoding.test_events import cloud_event, flow_run_fields, protobuf_payload, step
    from worker_chart_export.functions.decoding import events, values
    from worker_chart_export.testing import build_document_event_data

    name = "projects/p/databases/(default)/documents/flow_runs/R"
    fields = {"s": "text", "n": 3, "x": 2.5, "ok": True, "none": None, "list": [1, "a"], "map": {"k": "v"}}
    raw = build_document_event_data(name, fields).value
    assert_same(entry, late(values, "document_to_python", raw), reaches=False)
    kinds = [step(), step(status="PENDING"), step("LLM_REPORT"), {"note": "READY CHART_EXPORT"}, "READY"]
    for mix in product(kinds, repeat=2):
        steps = {f"s{i}": value for i, value in enumerate(mix)}
        for data in (
            protobuf_payload(flow_run_fields(steps)),
            json_format.MessageToDict(build_document_event_data(name, flow_run_fields(steps))),
        ):
            assert_same(entry, late(events, "decode_event", cloud_event(data)), reaches=False)


@checks
def test_a_request_is_logged_alike_whatever_the_status_of_an_app_that_answered_nothing(
    entry: Equivalent,
) -> None:
    """The status the middleware assumes for an app that failed before answering is read for
    its code only, and text without a leading code is a 500 too: the line of such a request,
    and of every answered one, is the same."""
    for status in (None, "200 OK", "404 NOT FOUND", "500 INTERNAL SERVER ERROR", "503 SERVICE UNAVAILABLE"):
        assert_same(entry, partial(middleware_lines, status))


def middleware_lines(status: str | None) -> list[tuple[str, str, dict[str, Any]]]:
    """The lines RequestLogMiddleware leaves for an app answering `status` (None: it raises
    before answering), and what the app's caller got."""
    from worker_chart_export.functions import serve

    lines: list[tuple[str, str, dict[str, Any]]] = []

    class Recorder:
        def __getattr__(self, method: str) -> Callable[..., None]:
            return lambda message, **fields: lines.append((method, message, fields))

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if status is None:
            raise RuntimeError("failed before answering")
        start_response(status, [])
        return [b"body"]

    original = serve._logger
    serve._logger = Recorder  # type: ignore[assignment]
    try:
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/"}
        body = serve.RequestLogMiddleware(app)(environ, lambda *args: None)
        lines.append(("answered", "", {"body": list(body)}))
    except RuntimeError as exc:
        lines.append(("raised", str(exc), {}))
    finally:
        serve._logger = original  # type: ignore[assignment]
    return lines


@checks
@MANY
@given(text=st.text(st.characters(exclude_categories=())) | st.text(alphabet="%25AaÃ©é€\xe9 ", max_size=8))
def test_an_attributes_readings_are_the_same_for_any_text(entry: Equivalent, text: str) -> None:
    """Python's codec names are case-insensitive: "LATIN-1" and "UTF-8" are the same codecs."""
    from worker_chart_export.functions.decoding import names

    assert_same(entry, late(names, "attribute_readings", text))


@checks
def test_a_payloads_documents_are_the_same_whichever_parser_splits_them(entry: Equivalent) -> None:
    """A payload with one old document read by the full parser instead of the fast splitter
    gives the same documents (the same name, update time and fields; only the fast path
    keeps the very bytes): every mix of no, one and two pieces of each document."""
    from worker_chart_export.functions.decoding import payload
    from worker_chart_export.functions.decoding.skim import RawDocument
    from worker_chart_export.functions.decoding.values import document_to_python
    from worker_chart_export.testing import build_document_event_data

    name = "projects/p/databases/(default)/documents/flow_runs/R"
    pieces = [{"flowKey": "daily", "n": 2}, {"steps": {"s": chart_step()}, "flowKey": "weekly"}]

    def serialized(fields: dict[str, Any] | None, old: dict[str, Any] | None) -> bytes:
        data: bytes = build_document_event_data(name, fields, old).SerializeToString()
        return data

    def documents(data: bytes) -> tuple[Any, ...]:
        new, old, shape = payload.split_event_payload(data)
        read = [None if b is None else RawDocument.FromString(b) for b in (new, old)]
        return shape, [None if d is None else (d.name, d.update_time, document_to_python(d)) for d in read]

    for new_pieces, old_pieces in product(range(3), repeat=2):
        data = b"".join(serialized(pieces[i], None) for i in range(new_pieces)) + b"".join(
            serialized(None, pieces[i]) for i in range(old_pieces)
        )
        if data:
            assert_same(entry, partial(documents, data), reaches=False)
    assert_same(entry, partial(documents, serialized(pieces[0], pieces[1])))  # reaches the mutant


@checks
@MANY
@given(
    text=st.text(st.characters(exclude_categories=()), max_size=40)
    | st.text(alphabet="Cg+/=AQé{", max_size=12)
)
@example(text="CgA=")
def test_a_text_payload_splits_alike(entry: Equivalent, text: str) -> None:
    """Python's codec names are case-insensitive: "ASCII" is the same codec."""
    from worker_chart_export.functions.decoding import payload

    assert_same(entry, late(payload, "split_event_payload", text))


@checks
def test_a_permit_is_handed_out_alike_whatever_falsy_value_says_not_to_block(entry: Equivalent) -> None:
    """threading.Semaphore reads `blocking` for its truth: None does not block, as False does.
    Every pool size and number taken: the same answer, the same permits left, nobody waiting."""
    from worker_chart_export.adapters.chart_img.permits import ConnectionPermits

    def acquire(size: int, taken: int) -> tuple[bool, int, int]:
        permits = ConnectionPermits(size)
        permits.take_available(taken)
        got = permits.acquire(timeout=0)
        return got, permits.take_available(size), permits.waiting

    for size in range(1, 4):
        for taken in range(size + 1):
            assert_same(entry, partial(acquire, size, taken))


@checks
def test_the_pool_is_the_same_for_any_size(entry: Equivalent) -> None:
    """httpx keeps alive as many connections as the pool holds when no keep-alive limit is
    named (None: no limit of its own): the same pool for every size."""
    from worker_chart_export.adapters.chart_img.http import ChartImgClient
    from worker_chart_export.testing import FakeClock as Clock

    def pool(size: int) -> tuple[int, int]:
        client = ChartImgClient(
            "https://chart-img.test", max_connections=size, request_timeout=30.0, clock=Clock()
        )
        made = client._client._transport._pool
        client.close()
        return made._max_connections, made._max_keepalive_connections

    for size in (1, 2, 8, 19, 20, 21, 32, 64, 1000):
        assert_same(entry, partial(pool, size))


@checks
def test_a_first_wave_call_is_rendered_alike(entry: Equivalent, tmp_path: Path) -> None:
    """A call's prepaid lease is taken on its first attempt, and asking again on a retry finds
    none: whatever its answers, a first-wave call ends the same, on the same accounts."""
    import httpx

    from harness.chart_img_server import PNG, chart_call
    from harness.logs import LogCapture
    from unit.adapters.chart_img.scripted import make_rig

    def render(answers: list[httpx.Response]) -> tuple[Any, ...]:
        r = make_rig(answers, LogCapture(), tmp_path, accounts=("acc1", "acc2"))
        call = chart_call("tpl_a")
        with r.api.for_step([call], Budget.starting_now(60.0, r.clock)) as step:
            result = step.render(call)
        return result, r.transport.accounts, [s for s in r.clock.sleeps if s]

    png = httpx.Response(200, content=PNG, headers={"content-type": "image/png"})
    failing = httpx.Response(500, json={"message": "Something Went Wrong"})
    limited = httpx.Response(429, json={"message": "Limit Exceeded"})
    for answers in ([png], [failing, png], [failing], [limited, png], [limited]):
        assert_same(entry, partial(render, answers))


@checks
def test_a_step_logs_its_exhaustion_once_whatever_falsy_value_it_starts_with(
    entry: Equivalent, tmp_path: Path
) -> None:
    """`exhaustion_logged` is read for its truth only: None says "not yet" as False does."""
    from harness.logs import LogCapture
    from unit.adapters.chart_img.scripted import make_rig

    def firsts() -> tuple[bool, list[bool]]:
        r = make_rig([], LogCapture(), tmp_path)
        with r.api.for_step([], Budget.starting_now(60.0, r.clock)) as step:
            return bool(step.exhaustion_logged), [step.first_to_log_exhaustion() for _ in range(3)]

    assert_same(entry, firsts)


@checks
def test_an_accounts_problem_is_described_alike(entry: Equivalent) -> None:
    """Pydantic gives every error of an item its `loc` (the field, never empty: the model has
    no validator of its own) and its `type`; an unknown field is named only by its position,
    and always among the item's names; only an extra field is outside our field names; field
    names are never shown, so whether they are searched for keys changes no message: every
    malformed accounts list (fields given by alias or by name, key-like names included) is
    described the same, loaded from the environment or not (JSON_SOURCE is parse_accounts'
    default), and a secret is read the same ("UTF-8" is "utf-8")."""
    from unit.adapters.chart_img.test_accounts_config import KEY, MALFORMED, FakeSecrets
    from worker_chart_export.adapters.chart_img import accounts_config

    key_like = "abcdefgh0123456789"
    configs = [config if isinstance(config, str) else json.dumps(config) for config, _ in MALFORMED] + [
        json.dumps(items)
        for items in (
            [{"id": "acc1", "api_key": KEY, "daily_limit": 0}],
            [{"id": "acc1", "apiKey": KEY, key_like: 1, "burst": "x"}],
            [{"id": 7, "apiKey": KEY, "rate_per_second": "fast", "plan": key_like}],
            [{"id": "a b", "apiKey": 5, "extra": None}, {"id": "ok", "apiKey": KEY, "dailyLimit": 2.5}],
            [{"id": key_like, "apiKey": key_like, key_like: key_like}],
            [{"apiKey": KEY}, {}, {"id": ""}],
        )
    ]
    for text in configs:
        assert_same(entry, late(accounts_config, "parse_accounts", text), reaches=False)
        loaded = late(
            accounts_config, "load_accounts", SecretStr(text), None, None, secret_client=FakeSecrets()
        )
        assert_same(entry, loaded, reaches=False)
    for payload in (json.dumps([{"id": "é", "apiKey": KEY}]).encode(), "ü".encode(), b"\xff"):
        read = late(accounts_config, "read_secret", "projects/p/secrets/s/versions/1", FakeSecrets(payload))
        assert_same(entry, read, reaches=False)
