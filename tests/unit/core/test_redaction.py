"""core/redaction.py: every form of a key found, judged by the leak scan's own finder
(tests/harness/secret_scan.py: it encodes forward where the redaction decodes)."""

from __future__ import annotations

import base64
import json
import string
from typing import Any

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
# A key inside the mark itself ("redacted") would be "found" in every redacted text: the mark
# is what a redaction writes, not a leak (a mutation run's example database once replayed it
# against every mutant, the code included). No other key can: the alphabet has no "<" or ">".
keys = st.text(alphabet=KEY_ALPHABET, min_size=MIN_RUN, max_size=48).filter(
    lambda key: key.lower() not in REDACTED  # the leak finder ignores case
)
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


# --- every escape decoded as what it stands for, and no more -------------------------------


@pytest.mark.parametrize("hex_case", ["04x", "04X"])
def test_a_key_cut_short_and_written_in_unicode_escapes_is_found(hex_case: str) -> None:
    """Only its first 10 characters, each a JSON `\\uXXXX` escape: no whole form of the key
    matches, the text is found decoded, and the escapes go whole."""
    escaped = "".join(f"\\u{ord(c):{hex_case}}" for c in PLAIN[:10])
    assert Redaction([PLAIN]).text(f"id {escaped} end") == f"id {REDACTED} end"


def test_a_key_cut_short_with_every_character_percent_encoded_is_found() -> None:
    """Every character as `%XX` (no 4 characters of the key stand in the text as written)."""
    encoded = "".join(f"%{ord(c):02X}" for c in PLAIN[:12])
    assert Redaction([PLAIN]).text(f"x {encoded} y") == f"x {REDACTED} y"


def test_a_key_cut_short_percent_encoded_then_three_more_times_is_found() -> None:
    """Four layers of percent-encoding (`%74` -> `%2574` -> ...): decoded four times."""
    encoded = "".join(f"%{ord(c):02X}" for c in PLAIN[:12])
    for _ in range(3):
        encoded = encoded.replace("%", "%25")
    assert encoded.startswith("%25252574%25252565")
    assert Redaction([PLAIN]).text(f"x {encoded} y") == f"x {REDACTED} y"


def test_a_run_with_one_character_in_a_unicode_escape_is_found() -> None:
    """`-key-` then `\\u0030` (a 0) then `12`: a run of 8 once decoded, though no 4
    characters of the key stand where a quick look would read them as written."""
    assert Redaction([PLAIN]).text("xx-key-\\u003012") == f"xx{REDACTED}"


def test_escapes_of_other_characters_are_not_taken_for_a_keys() -> None:
    """`\\u1041` is not an A, a JSON `\\n` is a newline (not an n): nothing to redact."""
    text = "\\u1041" * 8
    assert Redaction(["AAAAAAAA"]).text(text) is text
    text = json.dumps("abcd\nefgh\tij")[1:-1]  # abcd\nefgh\tij
    assert Redaction(["abcdnefghtij"]).text(text) is text


def test_a_text_that_is_exactly_eight_characters_of_a_key_is_redacted() -> None:
    assert Redaction([PLAIN]).text(PLAIN[:MIN_RUN]) == REDACTED
    assert Redaction([PLAIN]).text(PLAIN[-MIN_RUN:]) == REDACTED


# --- issue 38: any case, hex, \x escapes, HTML numeric references ---------------------------


@pytest.mark.parametrize("cased", [str.upper, str.lower, str.swapcase], ids=["upper", "lower", "swapped"])
def test_a_key_cut_short_in_another_case_is_found(cased: Any) -> None:
    key = "Ab12Cd34Ef56Gh78Ij90Kl/+"
    written = cased(key[:10])
    assert written != key[:10]
    assert Redaction([key]).text(f"id {written} end") == f"id {REDACTED} end"


@pytest.mark.parametrize("hex_case", [str.lower, str.upper], ids=["lower", "upper"])
def test_the_hex_of_a_keys_bytes_is_found_from_eight_bytes_on(hex_case: Any) -> None:
    """`test-key` is `746573742d6b6579`: 8 bytes of the key, 16 hex digits, inside a dump."""
    assert PLAIN[:8].encode().hex() == "746573742d6b6579"
    dump = hex_case("00ff" + PLAIN[:8].encode().hex() + "ff00")
    assert Redaction([PLAIN]).text(f"dump {dump}.") == f"dump {hex_case('00ff')}{REDACTED}{hex_case('ff00')}."
    seven = hex_case(PLAIN[:7].encode().hex())  # 7 bytes: too short to tell from other hex
    assert Redaction([PLAIN]).text(f"dump {seven}.") == f"dump {seven}."


@pytest.mark.parametrize(
    "escape",
    ["\\x{:02x}", "\\x{:02X}", "&#{};", "&#{:05d};", "&#{}", "&#x{:x};", "&#X{:04X};", "&#x{:02X}"],
    ids=["x-lower", "x-upper", "decimal", "decimal-padded", "decimal-bare", "hex", "hex-padded", "hex-bare"],
)
def test_a_key_cut_short_in_backslash_x_escapes_or_html_references_is_found(escape: str) -> None:
    """Every character of the key's first 10 escaped: decoded, found, each escape gone whole."""
    written = "".join(escape.format(ord(c)) for c in PLAIN[:10])
    assert Redaction([PLAIN]).text(f"<p>{written}</p>") == f"<p>{REDACTED}</p>"


def test_html_references_and_backslash_x_escapes_mixed_with_plain_characters_are_found() -> None:
    written = "te&#115;t-&#x6B;\\x65y-0"  # test-key-0 with three characters escaped
    assert Redaction([PLAIN]).text(f"key={written}&next") == f"key={REDACTED}&next"
    escaped_twice = json.dumps("\\x74\\x65\\x73\\x74\\x2d\\x6b\\x65\\x79")[1:-1]  # \\x74... in JSON
    assert Redaction([PLAIN]).text(escaped_twice) == REDACTED


def test_references_to_other_characters_are_not_taken_for_a_key() -> None:
    """`&#4161;` is no `A`, `&#99999999;` no character at all (read as U+10FFFF, no error)."""
    for text in ("&#4161;" * 8, "&#x1041;" * 8, "&#99999999;&#x110000;" * 4, "\\x4" * 8, "&#;&#x;" * 4):
        assert Redaction(["AAAAAAAA"]).text(text) is text


@pytest.mark.parametrize("around", ["\u0130", "\u00c9", "\U0001d400"], ids=["dotted-I", "E-acute", "astral"])
def test_a_key_in_another_case_is_cut_out_exactly_beside_any_character(around: str) -> None:
    """`İ` lower-cases to two characters (`i̇`): the search folds ASCII only then, and the
    positions still hold."""
    text = f"{around}{PLAIN.upper()}{around} {around}"
    assert Redaction([PLAIN]).text(text) == f"{around}{REDACTED}{around} {around}"


def test_hex_that_is_not_the_keys_is_kept() -> None:
    text = "trace 4bf92f3577b34da6a3ce929d0e0e4736 sha256 " + "0123456789abcdef" * 4
    assert Redaction([PLAIN[:9] + "zzzzzzzzzzzzzzzz"]).text(text) is text


# --- a short key behind stray escape characters: its whole forms, as written ----------------


@pytest.mark.parametrize(
    "text",
    [
        "%0000000%2F",  # quote(key, safe=""): a '/' encoded too
        "%0000000%2f",  # the same in lower-case hex
        "%0000000%252F",  # percent-encoded twice
        "%0000000\\/",  # JSON with '/' escaped
    ],
)
def test_a_short_key_behind_a_stray_percent_sign_is_found_in_each_written_form(text: str) -> None:
    """The stray `%` makes the decoder take `%00`, eating the key's first character: only
    the whole key's form, searched as written, finds it."""
    key = "0000000/"
    assert Redaction([key]).text(text) == "%" + REDACTED
    assert leaks([Redaction([key]).text(text)], [key]) == []


@pytest.mark.parametrize("hex_case", ["04x", "04X"])
def test_a_short_key_in_unicode_escapes_escaped_four_more_times_is_found(hex_case: str) -> None:
    """`\\u0030...\\u002F` JSON-encoded four more times: four decodings leave the escapes,
    which the whole key's `\\u` form (either case) finds."""
    key = "0000000/"
    text = "".join(f"\\u{ord(c):{hex_case}}" for c in key)
    for _ in range(4):
        text = json.dumps(text)[1:-1]
    assert text.startswith("\\" * 16 + "u0030")
    assert Redaction([key]).text(text + " and") == f"{REDACTED} and"


# --- base64 -------------------------------------------------------------------------------


@pytest.mark.parametrize("before", [b"", b"a", b"ab"], ids=["aligned", "one-byte-before", "two-bytes-before"])
def test_the_end_of_a_key_inside_a_base64_blob_is_found(before: bytes) -> None:
    blob = base64.b64encode(before + KEY[-12:].encode()).decode()
    assert leaks([blob], [KEY])
    redacted = Redaction([KEY]).text(blob)
    assert REDACTED in redacted and leaks([redacted], [KEY]) == []


@pytest.mark.parametrize("before", [b"", b"a", b"ab"], ids=["aligned", "one-byte-before", "two-bytes-before"])
def test_a_key_whose_base64_is_full_of_plus_signs_is_found_in_url_safe_base64(before: bytes) -> None:
    """'~~~' is `fn5+` in base64, `fn5-` in its URL-safe alphabet: every run holds one."""
    key = "~" * 12
    blob = base64.urlsafe_b64encode(before + key.encode()).decode()
    assert "+" not in blob and leaks([blob], [key])
    redacted = Redaction([key]).text(blob)
    assert REDACTED in redacted and leaks([redacted], [key]) == []


def test_a_short_keys_base64_is_found_from_eight_characters_on() -> None:
    """A key of 6 characters is 8 characters of base64 (found); one of 5 is 6 or 7 (too
    short to tell from other text: kept)."""
    assert base64.b64encode(b"abc123") == b"YWJjMTIz"
    assert Redaction(["abc123"]).text("token YWJjMTIz.") == f"token {REDACTED}."
    assert Redaction(["abc12"]).text("YWJjMTI= FiYzEy") == "YWJjMTI= FiYzEy"


# --- several keys ---------------------------------------------------------------------------


def test_a_short_key_that_starts_another_keys_run_is_found_on_its_own() -> None:
    redaction = Redaction(["abc12", "abc12xyz99"])
    assert redaction.text("id abc12 end") == f"id {REDACTED} end"
    assert redaction.text("id abc12xyz9 end") == f"id {REDACTED} end"


def test_no_keys_make_a_redaction_that_is_false_and_changes_nothing() -> None:
    for redaction in (Redaction([]), Redaction(["", ""])):
        assert not redaction and redaction.text(PLAIN) == PLAIN and redaction.content(b"\xff") == b"\xff"


def test_joining_a_redaction_with_the_same_keys_compiles_nothing_new() -> None:
    redaction = Redaction([PLAIN, KEY])
    assert (redaction | Redaction([KEY, PLAIN])) is redaction
    assert (redaction | redaction) is redaction
