"""The digest of a CHART-IMG request body (naming_contract.request_sha256, the worker's
requestDigest form), drawn into the PNG the chaos stand-in answers with (a tEXt chunk
`request-sha256`), and read back: a delivered chart names the body it was rendered from, so a
user can check it against the template current when it was rendered."""

from __future__ import annotations

import struct

from harness.chart_img_server import PNG, _png_chunk

DIGEST_KEYWORD = b"request-sha256"


def png_with_digest(digest: str, png: bytes = PNG) -> bytes:
    """`png` with a tEXt chunk `request-sha256` = digest, just before its IEND."""
    iend = png.rindex(b"IEND") - 4  # the chunk's length field
    return png[:iend] + _png_chunk(b"tEXt", DIGEST_KEYWORD + b"\0" + digest.encode("ascii")) + png[iend:]


def digest_in_png(png: bytes) -> str | None:
    """The `request-sha256` tEXt of a PNG, or None (not a PNG, or no such chunk)."""
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    at = 8
    while at + 8 <= len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        keyword, _, text = data.partition(b"\0")
        if kind == b"tEXt" and keyword == DIGEST_KEYWORD:
            return text.decode("ascii", "replace")
        at += 12 + length
    return None
