"""The checks of core/redaction.py's listed equivalents (scripts/mutation_equivalents.txt,
block `# core`): each applies the entry's mutant and compares it with the code, the base64
runs over every key of one character and any key hypothesis draws, the redaction over keys
and texts holding every form of them (each encoder's, cut short, partly escaped, behind
stray escape characters, in base64) with noise around. Registered in test_equivalents.py's
list of checks by importing this module there.
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable
from functools import partial
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.secret_scan import key_forms
from unit.mutation.mutants import Equivalent, assert_same, checks, late
from worker_chart_export.core import redaction
from worker_chart_export.core.redaction import Redaction

PRINTABLE = string.ascii_letters + string.digits + string.punctuation  # what a key may hold
PLAIN = "test-key-" + "0123456789abcdef" * 2
AWKWARD = 'k3y/"with\\odd+chars%=&?#-0123456789abcdef'
# keys of every length around MIN_RUN (8), with the characters the encoders treat apart
KEYS = st.text(alphabet=PRINTABLE, min_size=1, max_size=24) | st.sampled_from(
    [PLAIN, AWKWARD, "0000000/", "abc12", "abc123", "~" * 12, "AAAAAAAA", "%41%41%41%41", "\\u0041\\n/x"]
)
ESCAPES = ["{1}", "\\u{0:04x}", "\\u{0:04X}", "%{0:02X}"]  # a character as written, or escaped
STRAYS = ["%", "%0", "\\", "\\\\", "\\u00", "%25", "%5C", "\\/", "\n", " "]


def written(key: str, draw: Callable[[st.SearchStrategy[Any]], Any]) -> str:
    """One way a program may write (part of) `key`: a form of the leak finder's, a cut, or
    each character escaped or not, then maybe escaped again."""
    kind = draw(st.sampled_from(["form", "cut", "mixed"]))
    if kind == "form":
        return key_forms(key)[draw(st.sampled_from(sorted(key_forms(key))))]
    start = draw(st.integers(0, len(key)))
    part = key[start : start + draw(st.integers(0, len(key)))]
    if kind == "cut":
        return part
    text = "".join(draw(st.sampled_from(ESCAPES)).format(ord(c), c) for c in part)
    for _ in range(draw(st.integers(0, 5))):
        text = json.dumps(text)[1:-1] if draw(st.booleans()) else text.replace("%", "%25")
    return text


@st.composite
def keys_and_text(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[list[str], str]:
    keys = draw(st.lists(KEYS, min_size=0, max_size=3))
    pieces = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["stray", "noise", "key"] if keys else ["stray", "noise"]))
        if kind == "stray":
            pieces.append(draw(st.sampled_from(STRAYS)))
        elif kind == "noise":
            pieces.append(draw(st.text(alphabet=PRINTABLE + "\u1041é", max_size=6)))
        else:
            pieces.append(written(draw(st.sampled_from(keys)), draw))
    return keys, "".join(pieces)


def redacted(keys: list[str], text: str) -> tuple[Any, ...]:
    """Everything the redaction answers: built anew (a mutant of the compile step runs)."""
    made = Redaction(keys)
    data = text.encode("utf-8", "surrogatepass") + b"\xff\x80"
    return bool(made), made.text(text), made.content(data), made.content(b""), made.value({text: [text]})


def every_path(entry: Equivalent) -> None:
    """Texts that reach each function: keys short and long, every escape, base64, no keys."""
    samples = [
        ([PLAIN, AWKWARD], f"x %74%65%73%74-key-0 {PLAIN[3:14]} \\u0030\\u0031 done"),
        ([PLAIN], "x%2525252574%2525252565%2525252573%2525252574%2525252D%252525256B%2525252565 y"),
        ([PLAIN], "nothing of it here, 100% sure \\n"),
        (["0000000/"], "%0000000%2F and %0000000\\/"),
        (["abc12", "abc12xyz99"], "id abc12 and YWJjMTI= and abc12xyz9"),
        ([], "no keys at all"),
        ([PLAIN], PLAIN[:8]),
        ([PLAIN], "short"),
        # the texts the unit tests found each mutant a test kills with (tests/unit/core/test_redaction.py)
        ([PLAIN], "xx-key-\\u003012"),
        (["AAAAAAAA"], "\\u1041" * 8),
        (["abcdnefghtij"], "abcd\\nefgh\\tij"),
        (["0000000/"], "%0000000%2f %0000000%252F " + "\\" * 15 + "\\u0030" * 7 + "\\u002F"),
        ([AWKWARD], base64.b64encode(b"ab" + AWKWARD[-12:].encode()).decode()),
        (["~" * 12], base64.urlsafe_b64encode(b"a" + b"~" * 12).decode()),
        (["abc123", "abc12"], "YWJjMTIz YWJjMTI="),
    ]
    assert_same(entry, lambda: [redacted(keys, text) for keys, text in samples])


@checks
def test_the_base64_runs_are_the_same_for_any_key(entry: Equivalent) -> None:
    for char in PRINTABLE:
        for length in range(1, 10):
            assert_same(entry, late(redaction, "base64_runs", char * length))
    any_key_gives_the_same_base64_runs(entry)


@settings(max_examples=300, deadline=None)
@given(key=KEYS | st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30))
def any_key_gives_the_same_base64_runs(entry: Equivalent, key: str) -> None:
    assert_same(entry, late(redaction, "base64_runs", key))


@checks
def test_a_redaction_finds_the_same_in_any_text(entry: Equivalent) -> None:
    every_path(entry)
    any_text_is_redacted_the_same(entry)


@settings(max_examples=150, deadline=None)
@given(keys_and_text())
@example(([PLAIN], "%" + "".join(f"%{ord(c):02X}" for c in PLAIN[:12])))
@example((["0000000/"], "\\" * 15 + "".join(f"\\u{ord(c):04X}" for c in "0000000/")))
def any_text_is_redacted_the_same(entry: Equivalent, case: tuple[list[str], str]) -> None:
    keys, text = case
    assert_same(entry, partial(redacted, keys, text), reaches=False)
