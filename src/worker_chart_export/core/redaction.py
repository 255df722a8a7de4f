"""One redaction for every secret, in every form it can take in text (docs/design.md, "Secrets").

A `Redaction` is compiled once from the API keys a process holds and applied where text
leaves it: a log line, a Firestore field, a manifest, CLI output, a page. In a text it finds,
for every key, in any letter case (the key upper-, lower- or mixed-cased; hex digits of
either case):
- any run of `MIN_RUN` (8) or more consecutive characters of the key, so a key cut short
  (its first 10 characters, say) is found too; a key shorter than that only whole;
- the hex of the key's bytes, a run of `MIN_RUN` bytes of it (16 hex digits), or a shorter
  key's whole;
- the same once the text's escapes are decoded: JSON's (`\\/`, `\\"`, `\\\\`, `\\uXXXX`), URL
  percent-encoding (`%2F`, `%2f`; `quote` and `quote_plus` differ only for a space, which a
  key cannot hold), `\\xHH` (C, Python, JavaScript) and HTML's numeric character references
  (`&#65;`, `&#x41;`, `&#X0041;`: padded with zeros or not, `;` optional as browsers read
  them), decoded again while a pass finds more (`%5C%2F`); and the whole key as those
  encoders write it, as written (a stray `%` can make the decoder eat a short key's first
  characters);
- the key's base64, standard and URL-safe, at each of the three byte alignments a key can
  have inside a longer blob: any run of `MIN_RUN` characters that only the key's bytes
  determine.
Each find is replaced by `REDACTED` in the original text, an escape sequence whole.

Cost: applied once per text that leaves, never per byte of a transfer. A text without a
backslash, a percent sign or `&#` is not decoded. A sieve first: a run of 8 characters
holds, at a position that is a multiple of 4, 5 characters of the key; only a text where one
such slice, lower-cased, is 5 characters of a key (or of its hex or base64) is searched, by
one regular expression (the runs as a trie, over the text lower-cased), and only a text with
a find is decoded with positions. (Slices of 4 at multiples of 5 let one log line in ten
through once case was ignored: 4 characters of 38 lower-case ones are too common.)
`benchmarks/bench_redaction.py` measures a log line.
"""

from __future__ import annotations

import base64
import json
import re
import string
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "<redacted>"
MIN_RUN = 8
_SIEVE_WIDTH = 5  # a run of MIN_RUN holds a slice this wide at a multiple of _SIEVE_STEP
_SIEVE_STEP = MIN_RUN - _SIEVE_WIDTH + 1
_MAX_DECODING_PASSES = 4  # a text escaped four times over is decoded four times

# JSON's escapes, a URL's percent-escapes, `\xHH` and HTML's numeric character references;
# a key is printable ASCII, so a decoded escape stands for one character
_ESCAPE = re.compile(
    r"\\u[0-9a-fA-F]{4}|\\[\"\\/bfnrt]|%[0-9a-fA-F]{2}|\\x[0-9a-fA-F]{2}"
    r"|&#[xX]0*[0-9a-fA-F]{1,6};?|&#0*[0-9]{1,7};?",
    re.ASCII,
)
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# A key in any case: the runs are lower case and a text is searched lower-cased (twice as
# fast as a case-ignoring search of the trie). str.lower keeps positions but for the few
# characters it writes as two (U+0130): then only ASCII letters are folded, one for one.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _unescaped(sequence: str) -> str:
    if sequence[0] == "%":
        return chr(int(sequence[1:], 16))
    if sequence[0] == "&":  # &#65; &#x41;
        number = sequence[2:].rstrip(";")
        code = int(number[1:], 16) if number[0] in "xX" else int(number)
        return chr(min(code, sys.maxunicode))  # one too big: the last code point, in no key either
    if sequence[1] in "ux":
        return chr(int(sequence[2:], 16))
    return _SIMPLE_ESCAPES.get(sequence[1], sequence[1])


def base64_runs(key: str) -> list[str]:
    """The parts of the key's base64 that only its bytes determine, at each byte alignment
    (0, 1, 2) inside a longer blob, in the standard and the URL-safe alphabet."""
    data = key.encode("utf-8")
    runs = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data + b"\0\0").decode("ascii")
        first = -(-8 * offset // 6)  # the first character whose 6 bits are all the key's
        last = (8 * (offset + len(data))) // 6  # one past the last such character
        stable = encoded[first:last]
        runs += [stable, stable.replace("+", "-").replace("/", "_")]
    return list(dict.fromkeys(runs))


def _written_forms(key: str) -> set[str]:
    """The whole key as JSON and URL encoders write it, searched as written: decoding alone
    misses a short key behind a stray escape character (`%` before `0000000%22`: the
    decoder takes `%00`, eating the key's first characters; a longer key keeps a run)."""
    json_form = json.dumps(key)[1:-1]
    url_form = quote(key, safe="")
    forms = {
        json_form,
        json_form.replace("/", "\\/"),
        "".join(f"\\u{ord(char):04X}" for char in key),
        "".join(f"\\u{ord(char):04x}" for char in key),
        "".join(f"\\x{byte:02x}" for byte in key.encode("utf-8")),
        "".join(f"&#{ord(char)};" for char in key),
        "".join(f"&#x{ord(char):x};" for char in key),
        url_form,
        re.sub(r"%[0-9A-F]{2}", lambda escape: escape.group().lower(), url_form),
        quote(key),
        quote_plus(key),
        quote(url_form, safe=""),
    }
    return forms - {key}


def _hex_runs(key: str) -> set[str]:
    """The hex of the key's bytes, a run of MIN_RUN characters' worth (the search ignores case)."""
    return {run.encode("utf-8").hex() for run in _runs_of(key)}


def _runs_of(secret: str) -> set[str]:
    if len(secret) <= MIN_RUN:
        return {secret}
    return {secret[i : i + MIN_RUN] for i in range(len(secret) - MIN_RUN + 1)}


def _trie_pattern(words: Iterable[str]) -> str:
    """An expression matching each word, its alternatives sharing their prefixes."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def expression(node: Mapping[str, Any]) -> str:
        branches = [re.escape(char) + expression(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a word may end here: the longer words stay optional
            return f"(?:{body})?"
        return body

    return expression(trie)


class Redaction:
    """The keys' forms, compiled once; `text`, `value` and `content` apply it. Immutable."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self.keys: frozenset[str] = frozenset(key for key in keys if key)
        runs: set[str] = set()
        for key in self.keys:
            runs |= _runs_of(key) | _written_forms(key) | _hex_runs(key)
            for encoded in base64_runs(key):
                runs |= _runs_of(encoded) if len(encoded) >= MIN_RUN else set()
        runs = {run.lower() for run in runs}  # searched lower-cased: one spelling each
        # a lookahead: every start is found, overlapping finds included
        self._runs = re.compile(f"(?=({_trie_pattern(runs)}))", re.ASCII) if runs else None
        # a key shorter than the sieve's reach is searched for in every text
        self._sieve: frozenset[str] | None = None
        if all(len(key) >= MIN_RUN for key in self.keys):
            self._sieve = frozenset(
                run[i : i + _SIEVE_WIDTH] for run in runs for i in range(len(run) - _SIEVE_WIDTH + 1)
            )

    def __bool__(self) -> bool:
        return self._runs is not None

    def __or__(self, other: Redaction) -> Redaction:
        return self if other.keys <= self.keys else Redaction(self.keys | other.keys)

    def __repr__(self) -> str:
        return f"Redaction({len(self.keys)} key(s))"  # never the keys

    def text(self, text: str) -> str:
        """`text` with every form of every key replaced by REDACTED (`text` itself, the
        same object, when nothing was found)."""
        if self._runs is None or not self._may_hold(text):
            return text
        found: list[tuple[int, int]] = []
        for decoded, spans in _decodings(text):  # the text as written, then each decoding
            found += [(spans[start][0], spans[end - 1][1]) for start, end in self._found(decoded)]
        if not found:
            return text
        parts, done = [], 0
        for start, end in _merged(found):
            parts += [text[done:start], REDACTED]
            done = end
        parts.append(text[done:])
        return "".join(parts)

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string in it redacted (mapping keys too); other
        values are returned as they are."""
        if self._runs is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(v) for v in value)
        return value

    def content(self, data: bytes) -> bytes:
        """Raw bytes (an answer's body) redacted as text; bytes that are not UTF-8 survive."""
        if self._runs is None or not data:
            return data
        text = data.decode("utf-8", errors="surrogateescape")
        redacted = self.text(text)
        return data if redacted is text else redacted.encode("utf-8", errors="surrogateescape")

    def _may_hold(self, text: str) -> bool:
        """The sieve: False only when no run of a key can be in `text`, as written or decoded."""
        if self._sieve is None:
            return True
        return any(self._sifted(decoded) for decoded in _decoded_texts(text))

    def _sifted(self, text: str) -> bool:
        assert self._sieve is not None
        text = text.lower()  # the sieve's slices are lower case (positions do not matter here)
        if len(text) < MIN_RUN:
            return False
        starts = range(0, len(text) - _SIEVE_WIDTH + 1, _SIEVE_STEP)
        return not self._sieve.isdisjoint([text[i : i + _SIEVE_WIDTH] for i in starts])

    def _found(self, text: str) -> list[tuple[int, int]]:
        """The spans of `text` that are runs of a key (overlapping ones, each)."""
        if self._sieve is not None and not self._sifted(text):
            return []
        assert self._runs is not None
        return [(match.start(), match.end(1)) for match in self._runs.finditer(_lowered(text))]


NO_SECRETS = Redaction()


def _lowered(text: str) -> str:
    """`text` lower-cased, each character still where it was."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _decode_once(text: str) -> str | None:
    """`text` with its escapes decoded once; None when it has none."""
    if "\\" not in text and "%" not in text and "&#" not in text:
        return None
    decoded = _ESCAPE.sub(lambda escape: _unescaped(escape.group()), text)
    return None if decoded == text else decoded


def _decoded_texts(text: str) -> Iterator[str]:
    """`text` as written, then decoded once, twice... while a pass decodes something."""
    decoded: str | None = text
    for _ in range(_MAX_DECODING_PASSES + 1):
        if decoded is None:
            return
        yield decoded
        decoded = _decode_once(decoded)


def _decodings(text: str) -> Iterator[tuple[str, list[tuple[int, int]]]]:
    """What `_decoded_texts` yields, each with, for every character, the span of `text` it
    stands for. A form may be found at any level: decoding again can spoil a key that
    holds an escape-like `\\f` or `%41` of its own."""
    spans = [(i, i + 1) for i in range(len(text))]
    yield text, spans
    for _ in range(_MAX_DECODING_PASSES):
        escapes = list(_ESCAPE.finditer(text))
        if not escapes:
            return
        chars: list[str] = []
        inner: list[tuple[int, int]] = []
        done = 0
        for escape in escapes:
            chars += [text[done : escape.start()], _unescaped(escape.group())]
            inner += [*spans[done : escape.start()], (spans[escape.start()][0], spans[escape.end() - 1][1])]
            done = escape.end()
        chars.append(text[done:])
        inner += spans[done:]
        text, spans = "".join(chars), inner
        yield text, spans
