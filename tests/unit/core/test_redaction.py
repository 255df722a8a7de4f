"""core/redaction.py: every form of a key found, judged by the leak scan's own finder
(tests/harness/secret_scan.py: it encodes forward where the redaction decodes)."""

from __future__ import annotations

import base64
import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.secret_scan import key_forms, leaks
from worker_chart_export.core.redaction import MIN_RUN, NO_SECRETS, REDACTED, Redaction, base64_runs

# every character a key may hold (printable ASCII, no space), the awkward ones first
AWKWARD = '/"\\+%=&?#'
KEY = 'k3y/"with\\odd+chars%=&?#-0123456789abcdef'
PLAIN = "test-key-" + "0123456789abcdef" * 2


@pytest.mark.parametrize("key", [KEY, PLAIN], ids=["awkward", "plain"])
@pytest.mark.parametrize("form", list(key_forms(KEY)))
def test_each_form_of_a_key_is_redacted_inside_other_text(key: str, form: str) -> None:
    written = key_forms(key)[form]
    text = f'{{"message": "refused: {written}", "at": 3}} and then'
    assert leaks([text], [key])  # the finder sees it before
    redacted = Redaction([key]).text(text)
    assert leaks([redacted], [key]) == []
    assert REDACTED in redacted
    assert redacted.startswith('{"message": "refused: ') and redacted.endswith('", "at": 3} and then')


def test_a_key_inside_a_json_document_leaves_the_document_valid() -> None:
    document = json.dumps({"message": f"bad key {KEY}", "nested": [KEY[:12]]})
    redacted = Redaction([KEY]).text(document)
    assert json.loads(redacted) == {"message": f"bad key {REDACTED}", "nested": [REDACTED]}


def test_a_run_shorter_than_eight_characters_is_kept() -> None:
    text = f"id {PLAIN[: MIN_RUN - 1]} and {PLAIN[-(MIN_RUN - 1) :]}"
    assert Redaction([PLAIN]).text(text) is text


def test_text_without_a_key_is_returned_as_it_is() -> None:
    text = 'a line with 100% of its \\"escapes\\" and no key: run_20261122_btcusdt_0001'
    assert Redaction([KEY, PLAIN]).text(text) is text


def test_runs_that_touch_or_overlap_become_one_redaction() -> None:
    text = "x" + PLAIN[:12] + PLAIN[6:20] + "y"
    assert Redaction([PLAIN]).text(text) == f"x{REDACTED}y"


def test_a_key_shorter_than_a_run_is_found_whole_only() -> None:
    redaction = Redaction(["abc12"])
    assert redaction.text("abc1 abc12 %61bc12") == f"abc1 {REDACTED} {REDACTED}"


def test_an_escape_sequence_is_replaced_whole() -> None:
    text = "key=" + "".join(f"\\u{ord(c):04x}" for c in PLAIN) + "&next=1"
    assert Redaction([PLAIN]).text(text) == f"key={REDACTED}&next=1"


def test_escapes_decoded_again_and_again_up_to_four_times() -> None:
    from urllib.parse import quote

    written = KEY
    for _ in range(4):
        written = quote(written, safe="")
    assert Redaction([KEY]).text(written) == REDACTED


def test_base64_runs_are_the_characters_only_the_key_determines() -> None:
    runs = base64_runs(KEY)
    assert len(runs) == 4  # three alignments; the URL-safe alphabet differs in one (a ? of KEY)
    for offset in range(3):
        for before, after in ((b"", b""), (b"\x00\x00", b"\xff"), (b"\xff\xfe", b"\x00\x01\x02")):
            blob = before + b"\x80" * offset + KEY.encode() + after
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                assert any(run in encode(blob).decode() for run in runs)


def test_values_are_redacted_key_and_value_and_other_types_kept() -> None:
    value = {"message": PLAIN, PLAIN[:10]: [1, None, ("t", PLAIN)], "n": 2.5}
    expected = {"message": REDACTED, REDACTED: [1, None, ("t", REDACTED)], "n": 2.5}
    assert Redaction([PLAIN]).value(value) == expected


def test_bytes_that_are_not_utf8_survive_around_a_redaction() -> None:
    data = b"\xff\xfe" + PLAIN.encode() + b"\x80"
    assert Redaction([PLAIN]).content(data) == b"\xff\xfe" + REDACTED.encode() + b"\x80"
    assert Redaction([PLAIN]).content(b"\xff nothing \x80") == b"\xff nothing \x80"


def test_no_keys_change_nothing_and_the_repr_shows_no_key() -> None:
    assert not NO_SECRETS and NO_SECRETS.text(PLAIN) == PLAIN and NO_SECRETS.value([PLAIN]) == [PLAIN]
    redaction = Redaction([PLAIN, KEY])
    assert redaction and PLAIN not in repr(redaction) and repr(redaction) == "Redaction(2 key(s))"
    assert (redaction | Redaction([PLAIN])) is redaction
    assert (Redaction([PLAIN]) | Redaction([KEY])).keys == {PLAIN, KEY}


KEY_ALPHABET = string.ascii_letters + string.digits + AWKWARD + "-_.~"
keys = st.text(alphabet=KEY_ALPHABET, min_size=MIN_RUN, max_size=48)
padding = st.text(alphabet=string.printable, max_size=40)


@settings(max_examples=300, deadline=None)
@given(key=keys, other=keys, form=st.sampled_from(list(key_forms(KEY))), before=padding, after=padding)
def test_no_form_of_any_key_survives_in_any_surrounding(
    key: str, other: str, form: str, before: str, after: str
) -> None:
    text = before + key_forms(key)[form] + after + key_forms(other)["verbatim"]
    assert leaks([Redaction([key, other]).text(text)], [key, other]) == []


def test_a_short_key_behind_a_stray_escape_character_is_found() -> None:
    """Hypothesis found it: `%` before `0000000\\"` (the key `0000000"` JSON-escaped): the
    decoder took `%00`, eating the key's first characters, and no run of 8 was left. The
    whole key's written forms are searched as written too."""
    key = '0000000"'
    unicode_escaped = "".join(f"\\u{ord(c):04x}" for c in key)
    for text in ['%0000000\\"', "%0000000%22", "\\" + unicode_escaped, "%41%0000000%2522"]:
        assert leaks([Redaction([key]).text(text)], [key]) == [], text
    assert Redaction([key]).text('%0000000\\"') == "%" + REDACTED
    assert Redaction([key]).text("%0000000%22 and more") == "%" + REDACTED + " and more"
