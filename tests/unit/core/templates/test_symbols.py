"""The symbol grammar (core/templates/symbols.py): what CHART-IMG's docs show passes, every symbol of
their tables included; everything else is refused with the problem named."""

from __future__ import annotations

import pytest

from worker_chart_export.bundled import chart_img_docs as docs
from worker_chart_export.core.templates.symbols import MAX_SYMBOL_LENGTH, base_symbol_problem, symbol_problem

FORMULA = "(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10"


def test_the_documented_examples_pass() -> None:
    shown = docs.symbols()
    documented = [
        "CME_MINI:ES1!",
        "BYBIT:BTCUSDT.P",
        "BMV:CEMEX/CPO",
        FORMULA,
        shown.default,
        shown.formula_example,
        *shown.continuous_futures_examples,
        *shown.perpetual_examples,
        *shown.examples,  # every row of the TradingView Symbols tables
    ]
    assert len(documented) > 400
    refused = {s: symbol_problem(s, require_exchange=True) for s in documented}
    assert {s: p for s, p in refused.items() if p is not None} == {}


@pytest.mark.parametrize(
    "symbol",
    [
        "BINANCE:BTCUSDT*2",
        "(BINANCE:BTCUSDT-BYBIT:BTCUSDT.P)/BINANCE:BTCUSDT",
        "BINANCE:ETHUSDT/BINANCE:BTCUSDT",
        "((CME_MINI:ES1!+CME_MINI:NQ1!))/0.5",
        "NASDAQ:MSTR/10",
        "BMV:CEMEX/CPO*2",
    ],
)
def test_formulas_with_the_four_operators_parentheses_and_numbers_pass(symbol: str) -> None:
    assert symbol_problem(symbol, require_exchange=True) is None


@pytest.mark.parametrize("symbol", ["BTCUSDT", "ES1!", "CEMEX/CPO", "BTCUSDT.P", "7203", "BTC_USDT"])
def test_a_scope_symbol_may_leave_the_exchange_to_the_template(symbol: str) -> None:
    assert symbol_problem(symbol, require_exchange=False) is None
    assert symbol_problem(symbol, require_exchange=True) is not None


@pytest.mark.parametrize(
    ("symbol", "problem"),
    [
        ("(NASDAQ:MARA+NASDAQ:RIOT", "'(' at 1 is never closed"),
        ("NASDAQ:MARA)", "')' at 12 closes no '('"),
        ("((NASDAQ:MARA)", "'(' at 1 is never closed"),
        ("()", "'()' at 1 is empty"),
        ("NASDAQ:MARA+", "is missing after '+' at 12 (the text ends)"),
        ("NASDAQ:MARA++NASDAQ:RIOT", "is missing after '+' at 12 (found '+')"),
        ("/NASDAQ:MARA", "is missing at the start (found '/')"),
        ("(NASDAQ:MARA)NASDAQ:RIOT", "'NASDAQ:RIOT' at 14 follows an operand without an operator"),
        ("../x", "lower-case 'x' at 4"),
        ("../X", "'.' at 1 cannot start a symbol"),
        ("BINANCE:../../X", "'BINANCE:' at 1 is not followed by a symbol"),
        ("..", "'.' at 1 cannot start a symbol"),
        ("BINANCE:BTC..P", "'.' at 13 is out of place in 'BINANCE:BTC..'"),
        ("LSE:RR.!", "'!' at 8 is out of place"),
        ("LSE:RR..", "'.' at 8 is out of place"),
        (":BTCUSDT", "':' at 1 has no exchange before it"),
        ("BINANCE:BINANCE:BTCUSDT", "':' at 16 is out of place"),
        ("CME_MINI:ES1!!", "'!' at 14 is out of place"),
        ("CME_MINI:ES1!X", "'X' at 14 follows an operand without an operator"),  # a word after the '!'
        ("BINANCE:BTC\nUSDT", "character U+000A at 12 is not allowed (no spaces or control characters)"),
        ("BINANCE:BTC\x00", "character U+0000 at 12 is not allowed"),
        ("BINANCE:BTC\u202eUSDT", "character U+202E at 12 is not allowed"),
        ("BINANCE: BTCUSDT", "character U+0020 at 9 is not allowed"),
        ("binance:btcusdt", "lower-case 'b' at 1: TradingView symbols are upper case"),
        ("BINANCE:BTC$", "'$' at 12 is not allowed (only A-Z 0-9 _ . ! : / + - * ( ))"),
        ("BINANCE:BTCÜ", "character U+00DC at 12 is not allowed"),
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        ("A" * (MAX_SYMBOL_LENGTH + 1), f"is {MAX_SYMBOL_LENGTH + 1} characters long, at most 200"),
    ],
)
def test_refused_with_the_problem_named(symbol: object, problem: str) -> None:
    for require_exchange in (False, True):
        found = symbol_problem(symbol, require_exchange=require_exchange)
        assert found is not None and problem in found, found


def test_a_formula_sent_to_chart_img_names_an_exchange_on_every_symbol() -> None:
    assert symbol_problem("(NASDAQ:MARA+RIOT)/2", require_exchange=True) == (
        "'RIOT' at 14 has no exchange: CHART-IMG expects EXCHANGE:SYMBOL (e.g. BINANCE:BTCUSDT)"
    )
    assert symbol_problem("(10+2)/3", require_exchange=True) == "names no symbol, only numbers"
    assert symbol_problem("(NASDAQ:MARA+RIOT)/2", require_exchange=False) is None


def test_the_length_limit_is_inclusive() -> None:
    longest = "(" + "+".join(["NASDAQ:MARA"] * 16) + ")/1"
    assert len(longest) <= MAX_SYMBOL_LENGTH
    assert symbol_problem(longest, require_exchange=True) is None
    padded = "BINANCE:" + "A" * (MAX_SYMBOL_LENGTH - len("BINANCE:"))
    assert symbol_problem(padded, require_exchange=True) is None
    assert symbol_problem(padded + "A", require_exchange=True) is not None


def test_deep_parentheses_stay_within_the_limit_and_the_stack() -> None:
    deep = "(" * 99 + "NASDAQ:MARA" + ")" * 90
    assert symbol_problem(deep, require_exchange=True) == "'(' at 9 is never closed"


@pytest.mark.parametrize(
    ("symbol", "problem"),
    [
        ("", "must be a non-empty string"),
        (" A", "character U+0020 at 1 is not allowed (no spaces or control characters)"),
        ("A\x01", "character U+0001 at 2 is not allowed (no spaces or control characters)"),
        ("A#", "'#' at 2 is not allowed (only A-Z 0-9 _ . ! : / + - * ( ))"),
    ],
)
def test_the_first_problem_is_named_exactly(symbol: str, problem: str) -> None:
    assert symbol_problem(symbol, require_exchange=False) == problem


@pytest.mark.parametrize("symbol", ["BMV:CEMEX/C", "BMV:CEMEX/C2", "NASDAQ:A/(NASDAQ:B+1)"])
def test_a_slash_joins_a_name_but_not_a_parenthesis(symbol: str) -> None:
    assert symbol_problem(symbol, require_exchange=True) is None


def test_a_division_of_numbers_names_no_symbol() -> None:
    assert symbol_problem("1/2", require_exchange=True) == "names no symbol, only numbers"
    assert symbol_problem("1/2", require_exchange=False) is None


def test_a_slash_before_a_parenthesis_is_a_division() -> None:
    assert symbol_problem("NASDAQ:A/(B)", require_exchange=False) is None


def documented_base_symbols() -> list[str]:
    """What follows `EXCHANGE:` in every row of the docs' TradingView Symbols tables."""
    return [example.partition(":")[2] for example in docs.symbols().examples]


def test_every_documented_base_symbol_is_a_scope_symbol_but_the_one_with_a_slash() -> None:
    """The decision's source: the 391 rows' base symbols (digits first, `_`, `.`, a final `.`
    or `!`), each a scope.symbol; `CEMEX/CPO` aside, whose slash goes in the template."""
    bases = documented_base_symbols()
    assert len(bases) == 391 and "CEMEX/CPO" in bases
    refused = {base: base_symbol_problem(base) for base in bases}
    assert {b: p for b, p in refused.items() if p is not None and b != "CEMEX/CPO"} == {}
    assert "'/' at 6: scope.symbol is the base symbol, without a slash" in str(refused["CEMEX/CPO"])


def test_the_characters_of_a_base_symbol_are_those_of_the_documented_ones() -> None:
    """Written out: A-Z 0-9 `_` `.` `!` (and the slash refused above). No row holds `-`, so
    `-` is an operator only and `BTCUSDT-1000` a subtraction, never a ticker."""
    used = set("".join(documented_base_symbols()))
    expected = set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.!/")
    assert used <= expected and {"_", ".", "!", "/"} <= used and "-" not in used


@pytest.mark.parametrize(
    ("symbol", "character", "at"),
    [
        ("BTCUSDT*2", "*", 8),
        ("BTCUSDT*0", "*", 8),
        ("BTCUSDT-1000", "-", 8),
        ("BTCUSDT+1", "+", 8),
        ("(BTCUSDT)", "(", 1),
        ("1000-BTCUSDT", "-", 5),
    ],
)
def test_a_formula_is_not_a_base_symbol(symbol: str, character: str, at: int) -> None:
    """Each passes the grammar (a formula with the exchange left to the template) and would
    reach CHART-IMG as `BINANCE:BTCUSDT*2`: a chart of another price, labelled BTCUSDT."""
    assert symbol_problem(symbol, require_exchange=False) is None
    assert base_symbol_problem(symbol) == (
        f"{character!r} at {at}: scope.symbol is the base symbol (e.g. BTCUSDT), not a formula: no "
        f"documented base symbol holds {character!r}; a formula belongs in the template's "
        "chartImgSymbolTemplate (e.g. (NASDAQ:{symbol}+NASDAQ:RIOT)/2)"
    )


@pytest.mark.parametrize(
    ("symbol", "problem"),
    [
        (
            "BINANCE:BTCUSDT",
            "':' at 8: scope.symbol is the base symbol, without an exchange (e.g. BTCUSDT); "
            "the exchange belongs in the template's chartImgSymbolTemplate (e.g. BINANCE:{symbol})",
        ),
        ("CME_MINI:ES1!", "':' at 9: scope.symbol is the base symbol, without an exchange"),
        ("NASDAQ:MARA+NASDAQ:RIOT", "':' at 7: scope.symbol is the base symbol, without an exchange"),
        (
            "BTC/USDT",
            "'/' at 4: scope.symbol is the base symbol, without a slash (e.g. BTCUSDT); a symbol "
            "with '/' or a division belongs in the template's chartImgSymbolTemplate (e.g. BMV:{symbol}/CPO)",
        ),
        ("A/B/C", "'/' at 2: scope.symbol is the base symbol, without a slash"),
        ("BTCUSDT)", "')' at 8: scope.symbol is the base symbol (e.g. BTCUSDT), not a formula"),
        ("BTC^2", "'^' at 4 is not allowed (only A-Z 0-9 _ . !)"),
        ("BTC USDT", "character U+0020 at 4 is not allowed (no spaces or control characters)"),
        ("BTC٤", "character U+0664 at 4 is not allowed (only A-Z 0-9 _ . !)"),  # an Arabic-Indic 4
        ("BTC１", "character U+FF11 at 4 is not allowed"),  # a full-width 1
        ("btc/usdt", "lower-case 'b' at 1: TradingView symbols are upper case"),
        ("..", "'.' at 1 cannot start a symbol"),
        ("ES1!!", "'!' at 5 is out of place in 'ES1!!'"),
        ("A" * (MAX_SYMBOL_LENGTH + 1), f"is {MAX_SYMBOL_LENGTH + 1} characters long, at most 200"),
        (None, "must be a non-empty string"),
        ("", "must be a non-empty string"),
    ],
)
def test_a_base_symbol_refusal_names_the_first_character_that_does_not_belong(
    symbol: object, problem: str
) -> None:
    found = base_symbol_problem(symbol)
    assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize(
    "symbol", ["BTCUSDT", "ES1!", "BTCUSDT.P", "RR.", "FONE.DB.C", "NOVO_B", "7203", "1000PEPE"]
)
def test_a_base_symbol_passes(symbol: str) -> None:
    assert base_symbol_problem(symbol) is None
