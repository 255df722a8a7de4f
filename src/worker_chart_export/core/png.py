"""Whether bytes are a whole PNG, judged once for a fresh CHART-IMG answer and for a stored
object alike (PNG specification, ISO/IEC 15948 / RFC 2083, section 5: the signature, then
chunks of a 4-byte big-endian length, a 4-byte type, the data and a CRC-32 of type and data;
IHDR first, at least one IDAT, IEND last).

A body cut short (a connection closed mid-answer, an object half-written), a bare signature,
an HTML page behind a 200: each is named here, and never delivered or reused as a chart.
Only the structure is checked, not the pixels: decoding the image would cost far more, and a
chart whose every chunk's CRC holds was not damaged on its way.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IHDR_LENGTH = 13
# A chunk longer than this is no chunk of ours (the specification allows 2^31 - 1): a
# corrupt length must not make the check read past the body.
_MAX_CHUNK = 2**31 - 1


@dataclass(frozen=True)
class PngCheck:
    """The verdict: `problem` None for a whole PNG, with its IHDR size; else what is wrong."""

    problem: str | None
    width: int = 0
    height: int = 0

    @property
    def whole(self) -> bool:
        return self.problem is None


def check_png(data: bytes) -> PngCheck:
    """The signature, IHDR first (13 bytes), every chunk's length within the body and its
    CRC, an IDAT, IEND last with nothing after it."""
    if not data.startswith(PNG_SIGNATURE):
        return PngCheck("it does not begin with the PNG signature")
    offset, first, seen_idat = len(PNG_SIGNATURE), True, False
    width = height = 0
    while offset < len(data):
        if len(data) - offset < 12:
            return PngCheck(f"it ends inside a chunk header at byte {offset}")
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        end = offset + 8 + length
        if length > _MAX_CHUNK or end + 4 > len(data):
            return PngCheck(f"its {_name(kind)} chunk at byte {offset} runs past the end ({len(data)} bytes)")
        body = data[offset + 4 : end]  # type and data: what the CRC covers
        (crc,) = struct.unpack(">I", data[end : end + 4])
        if zlib.crc32(body) != crc:
            return PngCheck(f"its {_name(kind)} chunk at byte {offset} fails its CRC")
        if first:
            if kind != b"IHDR" or length != _IHDR_LENGTH:
                return PngCheck("its first chunk is not a 13-byte IHDR")
            width, height = struct.unpack(">II", data[offset + 8 : offset + 16])
            first = False
        seen_idat = seen_idat or kind == b"IDAT"
        offset = end + 4
        if kind == b"IEND":
            if not seen_idat:
                return PngCheck("it has no IDAT chunk (no image data)")
            if offset != len(data):
                return PngCheck(f"{len(data) - offset} bytes follow its IEND chunk")
            return PngCheck(None, width, height)
    if first:
        return PngCheck("it holds the PNG signature and nothing else")
    return PngCheck("it has no IEND chunk: the image is cut short")


def _name(kind: bytes) -> str:
    text = kind.decode("ascii", "replace")
    return text if text.isascii() and text.isalpha() else repr(kind)
