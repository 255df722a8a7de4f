"""Every pattern in src/ that reads input says which characters it means (issue 38).

A str pattern's `\\d`, `\\w`, `\\s`, `\\b` (and their negations) are Unicode by default: `\\d`
takes `٤١` for digits and int() then reads it as 41; IGNORECASE folds `K` (Kelvin) into `k`.
So a `re` call whose pattern holds one of them, or is case-insensitive, passes `re.ASCII`
(the rule for a check) or, for a scrubber that should match more, `re.UNICODE`, on purpose;
a pattern the walk cannot read (built at run time) says one of the two as well, unless it is
`re.escape(...)` (a literal). And `str.isdigit()`, `isdecimal()`, `isnumeric()`, `isalnum()`,
`isalpha()` (all Unicode: `"٤".isdigit()`, `"²".isdigit()`) stand after `isascii()` on the
same text in one `and`. The walk is over the AST: strings, comments and docstrings that only
mention a pattern do not count, and a pattern assembled from module constants
(`rf"rgb\\({_RGB}\\)"`) is read whole.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
# where the flags go when passed by position: re.compile(p, flags), re.match(p, s, flags), ...
FLAGS_AT = {"compile": 1, "match": 2, "fullmatch": 2, "search": 2, "findall": 2, "finditer": 2}
FLAGS_AT |= {"split": 3, "sub": 4, "subn": 4}
UNICODE_CLASSES = set("dDwWsSbB")
UNICODE_TESTS = {"isdigit", "isdecimal", "isnumeric", "isalnum", "isalpha"}
# an inline flag group that turns case-insensitivity on: (?i), (?ai:...), (?i-s:...)
INLINE_IGNORECASE = re.compile(r"\(\?[aLmsux]*i", re.ASCII)
INLINE_CHARSET = re.compile(r"\(\?[iLmsx]*[au]", re.ASCII)


def _unicode_sensitive(pattern: str) -> bool:
    """True when the pattern means something else under re.ASCII than under Unicode."""
    if INLINE_IGNORECASE.search(pattern):
        return True
    escaped = False
    for character in pattern:
        if escaped:
            if character in UNICODE_CLASSES:
                return True
            escaped = False
        elif character == "\\":
            escaped = True
    return False


def _flag_names(node: ast.expr | None) -> set[str]:
    """The `re.X` names a flags expression joins (`re.ASCII | re.DOTALL`)."""
    if node is None:
        return set()
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


class _Module:
    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.tree = ast.parse(source, filename=name)
        self.constants: dict[str, ast.expr] = {}
        for statement in self.tree.body:
            target, value = None, None
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            elif isinstance(statement, ast.AnnAssign):
                target, value = statement.target, statement.value
            if isinstance(target, ast.Name) and value is not None:
                self.constants[target.id] = value

    def text_of(self, node: ast.expr, depth: int = 0) -> str | bytes | None:
        """The pattern's text when the source spells it (constants and f-strings of module
        constants, `+` of those), else None."""
        if depth > 10:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.text_of(self.constants[node.id], depth + 1)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inner = value.value if isinstance(value, ast.FormattedValue) else value
                if isinstance(value, ast.FormattedValue) and (value.format_spec or value.conversion != -1):
                    return None
                text = self.text_of(inner, depth + 1)
                if not isinstance(text, str):
                    return None
                parts.append(text)
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.text_of(node.left, depth + 1), self.text_of(node.right, depth + 1)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        return None

    def offences(self) -> list[str]:
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("re", "regex"):
                found.append(
                    f"{self.name}:{node.lineno}: 'from {node.module} import' hides calls from this walk"
                )
            elif isinstance(node, ast.Import) and any(alias.name == "regex" for alias in node.names):
                found.append(f"{self.name}:{node.lineno}: the regex library (its classes are Unicode)")
            elif isinstance(node, ast.Call) and _is_re_call(node):
                problem = self._pattern_problem(node)
                if problem:
                    found.append(f"{self.name}:{node.lineno}: {problem}")
            if isinstance(node, ast.Attribute) and node.attr in UNICODE_TESTS and not self._guarded(node):
                found.append(f"{self.name}: {ast.unparse(node)}() without isascii()")
        return found

    def _pattern_problem(self, call: ast.Call) -> str | None:
        function = call.func.attr  # type: ignore[attr-defined]
        keywords = {k.arg: k.value for k in call.keywords}
        pattern = call.args[0] if call.args else keywords.get("pattern")
        at = FLAGS_AT[function]
        flags = call.args[at] if len(call.args) > at else keywords.get("flags")
        names = _flag_names(flags)
        if pattern is None:
            return f"re.{function} without a pattern this walk can find"
        text = self.text_of(pattern)
        if isinstance(text, bytes):
            return None  # a bytes pattern's classes are ASCII
        said = bool(names & {"ASCII", "A", "UNICODE", "U"}) or bool(text and INLINE_CHARSET.search(text))
        if text is None:
            if _is_literal(pattern) or said:
                return None
            built = ast.unparse(pattern)[:60]
            return f"re.{function}({built}): a pattern built at run time says re.ASCII or re.UNICODE"
        sensitive = _unicode_sensitive(text) or bool(names & {"IGNORECASE", "I"})
        if sensitive and not said:
            return f"re.{function}({text[:60]!r}): Unicode classes or case folding without re.ASCII"
        return None

    def _guarded(self, test: ast.Attribute) -> bool:
        """`x.isascii() and x.isdigit()`: the Unicode test stands after isascii() on the same text."""
        receiver = ast.dump(test.value)
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)):
                continue
            for index, value in enumerate(node.values):
                inside = any(n is test for n in ast.walk(value))
                if inside and any(_is_isascii_of(before, receiver) for before in node.values[:index]):
                    return True
        return False


def _is_re_call(node: ast.Call) -> bool:
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "re"
        and func.attr in FLAGS_AT
    )


def _is_literal(node: ast.expr) -> bool:
    """`re.escape(x)`, or a constant joining such pieces (`b"|".join(re.escape(n) for n in names)`)."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "re.escape":
        return True
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"):
        return False
    separator, pieces = node.func.value, node.args[0] if len(node.args) == 1 else None
    if not isinstance(separator, ast.Constant) or not isinstance(pieces, ast.GeneratorExp | ast.ListComp):
        return False
    plain = isinstance(separator.value, bytes) or (
        isinstance(separator.value, str) and not _unicode_sensitive(separator.value)
    )
    return plain and _is_literal(pieces.elt)


def _is_isascii_of(node: ast.expr, receiver: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "isascii"
        and ast.dump(node.func.value) == receiver
    )


def offences_in(paths: list[Path]) -> list[str]:
    modules = [_Module(str(path.relative_to(SRC)), path.read_text(encoding="utf-8")) for path in paths]
    return [offence for module in modules for offence in module.offences()]


def test_every_pattern_in_src_says_ascii_or_unicode() -> None:
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) > 100
    assert set(offences_in(paths)) == set()


@pytest.mark.parametrize(
    ("source", "offending"),
    [
        ('import re\nX = re.compile(r"\\d+")', True),
        ('import re\nX = re.compile(r"\\d+", re.ASCII)', False),
        ('import re\nX = re.compile(r"(?a)\\d+")', False),
        ('import re\nX = re.compile(r"[0-9]+")', False),
        ('import re\nX = re.compile(r"\\\\d")', False),  # a backslash, then a d
        ('import re\nX = re.compile(r"[\\w.]+")', True),
        ('import re\nX = re.compile(r"[a-z]+", re.IGNORECASE)', True),
        ('import re\nX = re.compile(r"(?i)[a-z]+")', True),
        ('import re\nX = re.compile(r"(?i)[a-z]+", re.I | re.A)', False),
        ('import re\nX = re.compile(r"\\s+", re.DOTALL)', True),
        ('import re\nX = re.compile(r"\\s+", flags=re.UNICODE)', False),
        ('import re\ndef f(s):\n    return re.match(r"\\d", s)', True),
        ('import re\ndef f(s):\n    return re.match(r"\\d", s, re.ASCII)', False),
        ('import re\ndef f(s):\n    return re.sub(r"\\s", "", s, 0, re.ASCII)', False),
        ('import re\ndef f(s):\n    return re.sub(r"\\s", "", s)', True),
        ('import re\nA = r"\\d"\nX = re.compile(rf"x{A}y")', True),  # assembled from a constant
        ('import re\nA = r"\\d"\nX = re.compile(rf"x{A}y", re.ASCII)', False),
        ("import re\ndef f(p):\n    return re.compile(p)", True),  # built at run time
        ("import re\ndef f(p):\n    return re.compile(re.escape(p))", False),
        ('import re\nN = [b"a"]\nX = re.compile(b"|".join(re.escape(n) for n in N))', False),
        ('import re\nN = ["a"]\nX = re.compile("|".join([re.escape(n) for n in N]))', False),
        ('import re\nN = ["a"]\nX = re.compile(r"\\s|".join(re.escape(n) for n in N))', True),
        ('import re\nN = ["a"]\nX = re.compile("|".join(n for n in N))', True),
        ('import re\nX = re.compile(rb"\\d")', False),
        ("from re import compile", True),
        ("def f(s):\n    return s.isdigit()", True),
        ("def f(s):\n    return s.isascii() and s.isdigit()", False),
        ("def f(s, x):\n    return x and (s.isascii() and s.isdigit())", False),
        ("def f(s, t):\n    return t.isascii() and s.isdigit()", True),
        ("def f(s):\n    return s.isdigit() and s.isascii()", True),
        ("def f(s):\n    return filter(str.isalnum, s)", True),
        ('X = "re.compile(r\\"\\\\d\\")"', False),  # a string that only mentions a pattern
    ],
)
def test_the_walk_tells_an_ascii_pattern_from_a_unicode_one(source: str, offending: bool) -> None:
    offences = _Module("probe.py", source).offences()
    assert bool(offences) == offending, offences
