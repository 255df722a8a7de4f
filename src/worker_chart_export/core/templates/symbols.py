"""TradingView symbols as CHART-IMG accepts them: a small grammar (docs/design.md, "Symbols").

The docs show `EXCHANGE:SYMBOL` (`BINANCE:BTCUSDT`), continuous futures (`CME_MINI:ES1!`),
perpetuals (`BYBIT:BTCUSDT.P`), a symbol with a slash (`BMV:CEMEX/CPO`) or ending in a dot
(`LSE:RR.`) and, since 2025-01-03,
formulas (`(NASDAQ:MARA+NASDAQ:RIOT+NASDAQ:WULF/NASDAQ:MSTR)/10`), but write no grammar.
This one accepts them and refuses everything else, naming the problem:

    expression = term { ("+" | "-") term }
    term       = factor { ("*" | "/") factor }
    factor     = symbol | number | "(" expression ")"
    symbol     = [ word ":" ] word { "." word | "/" word } [ "." | "!" ]
    number     = digits [ "." digits ]
    word       = one or more of A-Z 0-9 _

A `/` inside a symbol joins the next word only when that word is neither a number nor
followed by `:` (`BMV:CEMEX/CPO` is one symbol, `NASDAQ:WULF/NASDAQ:MSTR` a division); either
way the text is accepted as it is and sent unchanged. Upper case only, no spaces, at most
MAX_SYMBOL_LENGTH characters. The symbol CHART-IMG receives needs an exchange on every
operand (`require_exchange`); `scope.symbol` leaves it to the template (`BINANCE:{symbol}`).
`scope.symbol` itself is the base symbol (worker contract §3, §4.1: "in the base format,
without a slash", e.g. BTCUSDT; `base_symbol_problem`): one `symbol` of the grammar without
exchange or slash, so only A-Z 0-9 `_` `.` `!`, the characters of every base symbol in the
docs' tables (contracts/chart-img/symbols.json: 391 rows; digits first as in `2HP`, `000001`,
`NOVO_B`, `FONE.DB.C`, `RR.`, `ES1!`, `BTCUSDT.P`; no `-` in any of them). An exchange, a
slash or a formula is written in the template's `chartImgSymbolTemplate` (`BINANCE:{symbol}`,
`BMV:{symbol}/CPO`, `(NASDAQ:{symbol}+NASDAQ:RIOT)/2`), where the grammar accepts it.
Every class here is an explicit ASCII range: a Unicode `\\d` would take `٤` for a digit.
Pure: no I/O, nothing imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SYMBOL_LENGTH = 200
ALLOWED = "A-Z 0-9 _ . ! : / + - * ( )"
BASE_ALLOWED = "A-Z 0-9 _ . !"  # a base symbol's, as the docs' tables show them
_WORD = re.compile(r"[A-Z0-9_]*")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
_ALLOWED_CHARACTER = re.compile(r"[A-Z0-9_.!:/+\-*()]")
_BASE_CHARACTER = re.compile(r"[A-Z0-9_.!]")
_OPERATORS = {"+": "additive", "-": "additive", "*": "multiplicative", "/": "multiplicative"}


class SymbolProblem(ValueError):
    """Why a text is not a symbol; the message never holds the raw text of a bad character."""


@dataclass(frozen=True)
class _Token:
    kind: str  # "symbol", "number", "operator", "(", ")"
    text: str
    at: int  # 1-based position in the text, for messages
    exchange: str | None = None


def symbol_problem(text: object, *, require_exchange: bool) -> str | None:
    """None when `text` is a symbol (or formula) of the grammar above, else why not."""
    try:
        check_symbol(text, require_exchange=require_exchange)
    except SymbolProblem as problem:
        return str(problem)
    return None


def base_symbol_problem(text: object) -> str | None:
    """None when `text` may be a flow's `scope.symbol`: one symbol of the grammar, without
    exchange, slash or operator (worker contract §4.1: "in the base format, without a slash",
    e.g. BTCUSDT); else why not, naming the first character that does not belong. `BTC/USDT`
    would reach CHART-IMG as `BINANCE:BTC/USDT` (a 422, a unit), `BTCUSDT*2` as a chart of
    twice the price labelled BTCUSDT."""
    if isinstance(text, str) and 0 < len(text) <= MAX_SYMBOL_LENGTH:
        for index, character in enumerate(text):
            if not _BASE_CHARACTER.fullmatch(character):
                return _base_character_problem(character, index + 1)
    return symbol_problem(text, require_exchange=False)  # the shape: `.` and `!` in their places


def _base_character_problem(character: str, at: int) -> str:
    where = f"{character!r} at {at}: scope.symbol is the base symbol"
    if character == "/":
        return (
            f"{where}, without a slash (e.g. BTCUSDT); a symbol with '/' or a division belongs in "
            "the template's chartImgSymbolTemplate (e.g. BMV:{symbol}/CPO)"
        )
    if character == ":":
        return (
            f"{where}, without an exchange (e.g. BTCUSDT); the exchange belongs in the template's "
            "chartImgSymbolTemplate (e.g. BINANCE:{symbol})"
        )
    if character in _OPERATORS or character in "()":
        return (
            f"{where} (e.g. BTCUSDT), not a formula: no documented base symbol holds {character!r}; a "
            "formula belongs in the template's chartImgSymbolTemplate (e.g. (NASDAQ:{symbol}+NASDAQ:RIOT)/2)"
        )
    return _character_problem(character, at, allowed=BASE_ALLOWED)


def check_symbol(text: object, *, require_exchange: bool) -> None:
    """Raises SymbolProblem naming the first problem of `text`."""
    if not isinstance(text, str) or not text:
        raise SymbolProblem("must be a non-empty string")
    if len(text) > MAX_SYMBOL_LENGTH:
        raise SymbolProblem(f"is {len(text)} characters long, at most {MAX_SYMBOL_LENGTH} are allowed")
    for index, character in enumerate(text):
        if not _ALLOWED_CHARACTER.fullmatch(character):
            raise SymbolProblem(_character_problem(character, index + 1))
    tokens = _scan(text)
    _Parser(tokens).expression_to_end()
    symbols = [t for t in tokens if t.kind == "symbol"]
    if require_exchange:
        if not symbols:
            raise SymbolProblem("names no symbol, only numbers")
        bare = next((t for t in symbols if t.exchange is None), None)
        if bare is not None:
            raise SymbolProblem(
                f"{bare.text!r} at {bare.at} has no exchange: CHART-IMG expects EXCHANGE:SYMBOL "
                "(e.g. BINANCE:BTCUSDT)"
            )


def _scan(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    index = 0
    while index < len(text):
        character = text[index]  # every one allowed: check_symbol looked first
        if character in _OPERATORS or character in "()":
            kind = "operator" if character in _OPERATORS else character
            tokens.append(_Token(kind, character, index + 1))
            index += 1
            continue
        token, index = _operand(text, index)
        tokens.append(token)
    return tokens


def _character_problem(character: str, at: int, allowed: str = ALLOWED) -> str:
    if character.isascii() and character.islower():
        return f"lower-case {character!r} at {at}: TradingView symbols are upper case"
    if character.isspace() or not character.isprintable():
        return f"{_named(character)} at {at} is not allowed (no spaces or control characters)"
    return f"{_named(character)} at {at} is not allowed (only {allowed})"


def _named(character: str) -> str:
    """A character for a message: printable ASCII as itself, anything else by its code."""
    if character.isascii() and character.isprintable() and not character.isspace():
        return repr(character)
    return f"character U+{ord(character):04X}"


def _word_end(text: str, start: int) -> int:
    match = _WORD.match(text, start)
    assert match is not None  # `*` always matches
    return match.end()


def _operand(text: str, start: int) -> tuple[_Token, int]:
    """A symbol or a number starting at `start`; refuses a dangling `.`, `:` or `!`."""
    exchange = None
    end = _word_end(text, start)
    if end < len(text) and text[end] == ":":
        if end == start:
            raise SymbolProblem(f"':' at {end + 1} has no exchange before it")
        exchange = text[start:end]
        name_start = end + 1
        end = _word_end(text, name_start)
        if end == name_start:
            raise SymbolProblem(f"{exchange + ':'!r} at {start + 1} is not followed by a symbol")
    elif end == start:
        raise SymbolProblem(f"{_named(text[start])} at {start + 1} cannot start a symbol")
    end = _name_rest(text, end)
    if end < len(text) and text[end] == "!" and text[end - 1] != ".":
        end += 1
    if end < len(text) and text[end] in ":.!":
        raise SymbolProblem(f"{text[end]!r} at {end + 1} is out of place in {text[start : end + 1]!r}")
    body = text[start:end]
    kind = "number" if exchange is None and _NUMBER.fullmatch(body) else "symbol"
    return _Token(kind, body, start + 1, exchange), end


def _name_rest(text: str, end: int) -> int:
    """Past the `.word` and `/word` parts that continue a symbol's name, and one closing `.`
    (`LSE:RR.` is a documented symbol)."""
    while end < len(text):
        if text[end] == ".":
            after = _word_end(text, end + 1)
            if after == end + 1:
                return end + 1  # the name's last character: what follows is checked by the caller
            end = after
        elif text[end] == "/" and _slash_joins(text, end):
            end = _word_end(text, end + 1)
        else:
            return end
    return end


def _slash_joins(text: str, slash: int) -> bool:
    """`CEMEX/CPO`: yes; `/10` (a number) and `/NASDAQ:MSTR` (another symbol): no."""
    after = _word_end(text, slash + 1)
    word = text[slash + 1 : after]
    followed_by_colon = after < len(text) and text[after] == ":"
    return bool(word) and not _NUMBER.fullmatch(word) and not followed_by_colon


class _Parser:
    """Recursive descent over the tokens; depth is bounded by MAX_SYMBOL_LENGTH."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._next = 0

    def expression_to_end(self) -> None:
        self._expression()
        if self._next < len(self._tokens):
            token = self._tokens[self._next]
            if token.kind == ")":
                raise SymbolProblem(f"')' at {token.at} closes no '('")
            raise SymbolProblem(f"{token.text!r} at {token.at} follows an operand without an operator")

    def _expression(self) -> None:
        self._term()
        while self._at_operator("additive"):
            self._next += 1
            self._term()

    def _term(self) -> None:
        self._factor()
        while self._at_operator("multiplicative"):
            self._next += 1
            self._factor()

    def _factor(self) -> None:
        if self._next >= len(self._tokens):
            raise SymbolProblem(self._missing_operand(None))
        token = self._tokens[self._next]
        if token.kind in ("symbol", "number"):
            self._next += 1
        elif token.kind == "(":
            self._next += 1
            if self._peek_kind() == ")":
                raise SymbolProblem(f"'()' at {token.at} is empty")
            self._expression()
            if self._peek_kind() != ")":
                raise SymbolProblem(f"'(' at {token.at} is never closed")
            self._next += 1
        else:
            raise SymbolProblem(self._missing_operand(token))

    def _missing_operand(self, found: _Token | None) -> str:
        previous = self._tokens[self._next - 1] if self._next else None
        where = f"after {previous.text!r} at {previous.at}" if previous else "at the start"
        what = "the text ends" if found is None else f"found {found.text!r}"
        return f"a symbol, a number or '(' is missing {where} ({what})"

    def _at_operator(self, level: str) -> bool:
        if self._next >= len(self._tokens):
            return False
        token = self._tokens[self._next]
        return token.kind == "operator" and _OPERATORS[token.text] == level

    def _peek_kind(self) -> str | None:
        return self._tokens[self._next].kind if self._next < len(self._tokens) else None
