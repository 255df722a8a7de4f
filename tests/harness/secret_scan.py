"""Leak checks: no API key, in any form, may appear in anything the worker produced.

Two checks, written apart from the worker's own redaction (core/redaction.py) so that they
can judge it:

- Suite-wide: every key the tests hand out has the shape `test-key-<hex>` (see
  `chart_img_server.new_key`), so fixed patterns find its forms (`TEST_KEY_FORMS`): the key
  verbatim or cut to `test-key-` and a hex digit, in any case (JSON-escaped and URL-encoded,
  such a key reads the same), its `test-key` written as JSON `\\uXXXX` escapes,
  percent-escapes, `\\xHH` escapes, HTML numeric references (decimal or hex, padded or not) or
  the hex of its bytes, and the base64 of `test-key-` at each of the three byte alignments,
  in both alphabets. Scanned: each
  test's captured stdout/stderr and logging (`report.sections`), every `log_capture` stream
  (see harness.logs), and whatever a harness feeds to `scan_text` (documents read back from
  the Firestore emulator, GCS objects, the output of served worker processes). A hit fails
  the run, naming the test and the source.
- For given keys of any shape (`leaks(texts, keys)`): each form `key_forms` makes, found by
  encoding every run of `MIN_RUN` characters of the key as each encoder would (JSON, with and
  without `\\/`, `\\u` escapes in either case; URL quote, quote_plus, lower-case hex, twice;
  upper, lower and mixed case; the hex of its bytes; `\\xHH`; HTML's `&#65;`, `&#00065;`,
  `&#x41;`, `&#X0041;`) and searching for them ignoring case, and base64 found by decoding
  every base64-looking word of the text at each of its four character offsets, in both
  alphabets, and looking for a run of the key in the bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

MIN_RUN = 8  # a run of this many characters of a key is a leak (a key cut short, say)
TEST_KEY = re.compile(r"test-key-[0-9a-f]{16,}")


def _base64_patterns(prefix: bytes) -> list[str]:
    """The base64 characters only `prefix` determines, at each byte alignment, both alphabets."""
    patterns = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + prefix + b"\0\0").decode()
        stable = encoded[-(-8 * offset // 6) : (8 * (offset + len(prefix))) // 6]
        patterns += [re.escape(stable), re.escape(stable.translate(str.maketrans("+/", "-_")))]
    return patterns


TEST_KEY_FORMS = re.compile(
    "|".join(
        [
            r"(?i:test-key-[0-9a-f])",
            "".join(rf"\\u(?i:{ord(c):04x})" for c in "test-key"),
            "".join(rf"%(?i:{ord(c):02x})" for c in "test-key"),
            "".join(rf"\\(?i:x{ord(c):02x})" for c in "test-key"),
            "".join(rf"&#0*{ord(c)};?" for c in "test-key"),
            "".join(rf"&#(?i:x0*{ord(c):x});?" for c in "test-key"),
            "(?i:" + b"test-key".hex() + ")",
            *_base64_patterns(b"test-key-"),
        ]
    ),
    re.ASCII,
)


@dataclass
class Leaks:
    found: list[str] = field(default_factory=list)


LEAKS = Leaks()


def scan_text(text: str, source: str) -> list[str]:
    """Records and returns the leaks in `text`; the message shows only the find's first chars."""
    hits = [f"{source}: {m.group(0)[:13]}…" for m in TEST_KEY_FORMS.finditer(text)]
    # pytest repeats a test's earlier sections in its later phase reports: record each hit once
    LEAKS.found.extend(hit for hit in dict.fromkeys(hits) if hit not in LEAKS.found)
    return hits


# --- any key, every form --------------------------------------------------------------------


def _unicode_escapes(text: str, upper: bool) -> str:
    return "".join(f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}" for c in text)


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _mixed_case(text: str) -> str:
    return "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(text))


# How a program writes text into JSON or a URL: each maps a run of the key to what appears.
ENCODERS: dict[str, Callable[[str], str]] = {
    "verbatim": lambda run: run,
    "json": lambda run: json.dumps(run)[1:-1],
    "json_slash": lambda run: json.dumps(run)[1:-1].replace("/", "\\/"),
    "json_unicode_upper": lambda run: _unicode_escapes(run, upper=True),
    "json_unicode_lower": lambda run: _unicode_escapes(run, upper=False),
    "url_quote": lambda run: quote(run, safe=""),
    "url_quote_path": lambda run: quote(run),
    "url_quote_plus": quote_plus,
    "url_lower_hex": lambda run: _lower_hex(quote(run, safe="")),
    "url_twice": lambda run: quote(quote(run, safe=""), safe=""),
    "upper_case": str.upper,
    "lower_case": str.lower,
    "mixed_case": _mixed_case,
    "hex_lower": lambda run: run.encode().hex(),
    "hex_upper": lambda run: run.encode().hex().upper(),
    "backslash_x_lower": lambda run: "".join(f"\\x{byte:02x}" for byte in run.encode()),
    "backslash_x_upper": lambda run: "".join(f"\\x{byte:02X}" for byte in run.encode()),
    "html_decimal": lambda run: "".join(f"&#{ord(c)};" for c in run),
    "html_decimal_padded": lambda run: "".join(f"&#{ord(c):05d};" for c in run),
    "html_hex": lambda run: "".join(f"&#x{ord(c):x};" for c in run),
    "html_hex_upper_padded": lambda run: "".join(f"&#X{ord(c):04X};" for c in run),
}


def key_forms(key: str) -> dict[str, str]:
    """Every form of `key` a careless provider or program could write, by name: each
    encoder's whole key, the key inside a longer base64 blob at each byte alignment and in
    both alphabets, and the key cut short (its first 10 characters, a run of 8 inside)."""
    raw = key.encode()
    forms = {name: encode(key) for name, encode in ENCODERS.items()}
    for offset in range(3):
        blob = b"\x93" * offset + raw + b"\x07\xfe"
        forms[f"base64_{offset}"] = base64.b64encode(blob).decode()
        forms[f"base64_urlsafe_{offset}"] = base64.urlsafe_b64encode(blob).decode()
    forms["first_10"] = key[:10]
    forms["inner_8"] = key[1:9]
    return forms


@cache
def _runs_pattern(key: str) -> re.Pattern[str]:
    runs = {key} if len(key) <= MIN_RUN else {key[i : i + MIN_RUN] for i in range(len(key) - MIN_RUN + 1)}
    needles = {encode(run) for run in runs for encode in ENCODERS.values()}
    pattern = "|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True))
    return re.compile(pattern, re.IGNORECASE | re.ASCII)  # a key in any case is the key


_BASE64_WORD = re.compile(r"[A-Za-z0-9+/\-_]{8,}")


def _in_base64(text: str, key: str) -> bool:
    raw = key.encode()
    runs = [raw] if len(raw) <= MIN_RUN else [raw[i : i + MIN_RUN] for i in range(len(raw) - MIN_RUN + 1)]
    for word in _BASE64_WORD.findall(text):
        standard = word.replace("-", "+").replace("_", "/")
        for start in range(4):
            chunk = standard[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            try:
                decoded = base64.b64decode(chunk, validate=True)
            except (binascii.Error, ValueError):
                continue
            if any(run in decoded for run in runs):
                return True
    return False


def leaks(texts: Iterable[str], keys: Iterable[str]) -> list[str]:
    """`key #i: <form>` for each key found in a text, in any form (expected: none)."""
    texts = list(texts)
    found = []
    for index, key in enumerate(keys):
        for text in texts:
            match = _runs_pattern(key).search(text)
            if match:
                found.append(f"key #{index}: {_form_of(match.group(0), key)}")
                break
            if _in_base64(text, key):
                found.append(f"key #{index}: base64")
                break
    return found


def _form_of(find: str, key: str) -> str:
    """Which encoder wrote `find` (for the failure message: never the key itself)."""
    for name, encode in ENCODERS.items():
        runs = (encode(key[i : i + MIN_RUN]).lower() for i in range(max(1, len(key) - MIN_RUN + 1)))
        if find.lower() in runs:
            return name
    return "a run of it"


# --- the suite-wide report ------------------------------------------------------------------


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, content in report.sections:
        scan_text(content, f"{report.nodeid} [{name}]")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LEAKS.found:
        terminalreporter.section("API key leak scan: FAILED", red=True)
        for leak in LEAKS.found:
            terminalreporter.line(leak)
    else:
        terminalreporter.line("API key leak scan: no test key in any captured output")


# Under pytest-xdist (scripts/test.sh) each worker is a session of its own: the leaks its
# fixtures scanned (documents, objects, log_capture, served processes) are in its LEAKS only,
# and its exit status is not the run's. A worker hands them to the controller, which reports.
WORKER_LEAKS = "api_key_leaks"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker
        workeroutput[WORKER_LEAKS] = list(LEAKS.found)
    elif LEAKS.found and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the controller hears a worker end
def pytest_testnodedown(node: Any, error: object) -> None:
    for leak in getattr(node, "workeroutput", {}).get(WORKER_LEAKS, []):
        if leak not in LEAKS.found:
            LEAKS.found.append(leak)
