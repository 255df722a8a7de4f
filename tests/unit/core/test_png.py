"""core/png.py: a chart is delivered or reused only whole. Each broken body is built here
from a real PNG (the stand-in's, and one Pillow writes), chunk by chunk."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from harness.chart_img_server import PNG
from worker_chart_export.core.png import check_png


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def pillow_png(width: int = 640, height: int = 480) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (20, 40, 60)).save(out, format="PNG")
    return out.getvalue()


SIGNATURE = b"\x89PNG\r\n\x1a\n"
IHDR = chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))
IDAT = chunk(b"IDAT", zlib.compress(b"\x00" * 13 * 3))
IEND = chunk(b"IEND", b"")


def test_a_whole_png_is_whole_with_its_size() -> None:
    assert check_png(PNG).whole and (check_png(PNG).width, check_png(PNG).height) == (4, 3)
    made = check_png(pillow_png(640, 480))
    assert made.problem is None and (made.width, made.height) == (640, 480)
    assert check_png(SIGNATURE + IHDR + IDAT + IEND).whole


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"", "it does not begin with the PNG signature"),
        (b"<html><body>oops</body></html>", "it does not begin with the PNG signature"),
        (SIGNATURE, "it holds the PNG signature and nothing else"),
        (SIGNATURE + IHDR + IDAT, "it has no IEND chunk: the image is cut short"),
        (
            SIGNATURE + IHDR + IDAT + IEND[:6],
            f"it ends inside a chunk header at byte {len(SIGNATURE + IHDR + IDAT)}",
        ),
        (SIGNATURE + IDAT + IHDR + IEND, "its first chunk is not a 13-byte IHDR"),
        (SIGNATURE + chunk(b"IHDR", b"\x00" * 12) + IDAT + IEND, "its first chunk is not a 13-byte IHDR"),
        (SIGNATURE + IHDR + IEND, "it has no IDAT chunk (no image data)"),
        (SIGNATURE + IHDR + IDAT + IEND + b"x", "1 bytes follow its IEND chunk"),
        (
            SIGNATURE + IHDR + IDAT[:-4] + b"\x00\x00\x00\x00" + IEND,
            f"its IDAT chunk at byte {len(SIGNATURE + IHDR)} fails its CRC",
        ),
        (
            SIGNATURE + IHDR + b"\x7f\xff\xff\xffIDAT" + b"\x00" * 20,
            f"its IDAT chunk at byte {len(SIGNATURE + IHDR)} runs past the end",
        ),
    ],
    ids=[
        "empty",
        "html",
        "signature-only",
        "no-iend",
        "cut-in-a-header",
        "ihdr-not-first",
        "ihdr-short",
        "no-idat",
        "after-iend",
        "bad-crc",
        "length-past-the-end",
    ],
)
def test_a_broken_body_is_named(body: bytes, problem: str) -> None:
    verdict = check_png(body)
    assert not verdict.whole
    assert verdict.problem is not None and verdict.problem.startswith(problem)


@pytest.mark.parametrize("cut", [8, 20, 33, 40, 50])
def test_every_prefix_of_a_real_png_is_refused(cut: int) -> None:
    """A body cut short anywhere (a connection closed mid-answer) is never whole."""
    real = pillow_png()
    assert not check_png(real[: len(real) * cut // 100]).whole
    assert not check_png(PNG[: min(cut, len(PNG) - 1)]).whole


def test_a_flipped_byte_inside_the_image_data_fails_its_crc() -> None:
    real = bytearray(pillow_png())
    idat = real.index(b"IDAT")
    real[idat + 10] ^= 0xFF
    verdict = check_png(bytes(real))
    assert verdict.problem is not None and "IDAT chunk" in verdict.problem and "CRC" in verdict.problem
