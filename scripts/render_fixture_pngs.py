#!/usr/bin/env python3
"""Render stand-in CHART-IMG fixture PNGs for the chart templates, from synthetic OHLCV.

The mock Chart API (CHARTS_API_MODE=mock) answers from files in
fixtures/chart-api/chart-img/advanced-chart-v2/ (and, for a layout template, in
layout-chart-v2/: core.naming.FIXTURE_DIRS). Real CHART-IMG images cannot be committed
without spending an account's daily quota, so this script draws an honest stand-in for each
template instead: a random-walk market (seeded from the chart symbol and timeframe, so every
template of one market shows the same candles), the template's theme and size, candles, and
a simple rendition of its studies computed from that data. A layout template's indicators
are its TradingView layout's, unknown here: its image shows the candles and names the layout.
Every image says "SYNTHETIC DATA" in its caption.

Deterministic: no network, no clock, a fixed seed, no PNG metadata; running it twice gives
identical bytes (with the same Python and Pillow versions).

    PYTHONPATH=src python scripts/render_fixture_pngs.py            # write the fixtures
    PYTHONPATH=src python scripts/render_fixture_pngs.py --check    # exit 1 if any is stale
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from worker_chart_export.core.naming import FIXTURE_DIRS, fixture_key, success_fixture_name

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TEMPLATES_DIR = REPO_ROOT / "chart-templates"
DEFAULT_OUT_DIR = REPO_ROOT / "fixtures" / "chart-api"  # each endpoint's folder below it

BAR_COUNT = 120
# The synthetic time axis starts here; nothing depends on the wall clock.
SYNTHETIC_START = datetime(2026, 11, 17, tzinfo=UTC)
INTERVAL_MINUTES: dict[str, int] = {
    "1m": 1,
    "2m": 2,
    "3m": 3,
    "5m": 5,
    "15m": 15,
    "30m": 30,
    "45m": 45,
    "1h": 60,
    "2h": 120,
    "3h": 180,
    "4h": 240,
    "6h": 360,
    "8h": 480,
    "12h": 720,
    "1D": 1440,
    "2D": 2880,
    "3D": 4320,
    "1W": 10080,
    "1M": 43200,
    "3M": 129600,
    "6M": 259200,
    "1Y": 525600,
}

RGB = tuple[int, int, int]
Series = list[float | None]


# --------------------------------------------------------------------------- market data


@dataclass(frozen=True)
class Bar:
    time: datetime
    open: float
    high: float
    low: float
    close: float
    volume: float


def seeded_rng(seed_text: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "big"))


def synthetic_bars(rng: random.Random, count: int, step: timedelta) -> list[Bar]:
    """A geometric random walk with slowly changing volatility and a small drift."""
    price = rng.uniform(55_000.0, 75_000.0)
    drift = rng.uniform(-0.0010, 0.0010)
    phase = rng.uniform(0.0, 2 * math.pi)
    bars: list[Bar] = []
    for i in range(count):
        sigma = 0.0035 + 0.0030 * abs(math.sin(phase + i / 19.0))
        ret = drift + rng.gauss(0.0, sigma)
        open_ = price
        close = open_ * (1.0 + ret)
        high = max(open_, close) * (1.0 + abs(rng.gauss(0.0, sigma / 2)))
        low = min(open_, close) * (1.0 - abs(rng.gauss(0.0, sigma / 2)))
        volume = rng.lognormvariate(0.0, 0.35) * (900.0 + 250_000.0 * abs(ret))
        bars.append(Bar(SYNTHETIC_START + i * step, open_, high, low, close, volume))
        price = close
    return bars


# --------------------------------------------------------------------------- indicators


def sma(values: Sequence[float], length: int) -> Series:
    out: Series = []
    for i in range(len(values)):
        out.append(None if i < length - 1 else sum(values[i - length + 1 : i + 1]) / length)
    return out


def ema(values: Sequence[float | None], length: int) -> Series:
    """EMA seeded with the SMA of the first `length` defined values (as TradingView does)."""
    out: Series = [None] * len(values)
    k = 2.0 / (length + 1)
    window: list[float] = []
    acc: float | None = None
    for i, value in enumerate(values):
        if value is None:
            continue
        if acc is None:
            window.append(value)
            if len(window) == length:
                acc = sum(window) / length
                out[i] = acc
            continue
        acc = value * k + acc * (1.0 - k)
        out[i] = acc
    return out


def bollinger(values: Sequence[float], length: int, mult: float) -> tuple[Series, Series, Series]:
    basis = sma(values, length)
    upper: Series = []
    lower: Series = []
    for i, mid in enumerate(basis):
        if mid is None:
            upper.append(None)
            lower.append(None)
            continue
        window = values[i - length + 1 : i + 1]
        dev = math.sqrt(sum((v - mid) ** 2 for v in window) / length)
        upper.append(mid + mult * dev)
        lower.append(mid - mult * dev)
    return basis, upper, lower


def rsi(values: Sequence[float], length: int) -> Series:
    """Wilder's RSI (RMA of gains and losses)."""
    out: Series = [None] * len(values)
    gains = [max(values[i] - values[i - 1], 0.0) for i in range(1, len(values))]
    losses = [max(values[i - 1] - values[i], 0.0) for i in range(1, len(values))]
    if len(gains) < length:
        return out
    avg_gain = sum(gains[:length]) / length
    avg_loss = sum(losses[:length]) / length
    for i in range(length, len(values)):
        if i > length:
            avg_gain = (avg_gain * (length - 1) + gains[i - 1]) / length
            avg_loss = (avg_loss * (length - 1) + losses[i - 1]) / length
        out[i] = 100.0 if avg_loss == 0 else 100.0 - 100.0 / (1.0 + avg_gain / avg_loss)
    return out


def macd(values: Sequence[float], fast: int, slow: int, signal: int) -> tuple[Series, Series, Series]:
    fast_ema, slow_ema = ema(values, fast), ema(values, slow)
    line: Series = [
        f - s if f is not None and s is not None else None for f, s in zip(fast_ema, slow_ema, strict=True)
    ]
    signal_line = ema(line, signal)
    hist: Series = [
        m - s if m is not None and s is not None else None for m, s in zip(line, signal_line, strict=True)
    ]
    return line, signal_line, hist


def parabolic_sar(bars: Sequence[Bar], start: float, increment: float, maximum: float) -> Series:
    """Wilder's Parabolic SAR."""
    out: Series = [None] * len(bars)
    if len(bars) < 3:
        return out
    rising = bars[1].close >= bars[0].close
    af = start
    extreme = max(bars[0].high, bars[1].high) if rising else min(bars[0].low, bars[1].low)
    sar = min(bars[0].low, bars[1].low) if rising else max(bars[0].high, bars[1].high)
    for i in range(2, len(bars)):
        bar = bars[i]
        sar += af * (extreme - sar)
        if rising:
            sar = min(sar, bars[i - 1].low, bars[i - 2].low)
            if bar.low < sar:
                rising, sar, extreme, af = False, extreme, bar.low, start
            elif bar.high > extreme:
                extreme, af = bar.high, min(af + increment, maximum)
        else:
            sar = max(sar, bars[i - 1].high, bars[i - 2].high)
            if bar.high > sar:
                rising, sar, extreme, af = True, extreme, bar.high, start
            elif bar.low < extreme:
                extreme, af = bar.low, min(af + increment, maximum)
        out[i] = sar
    return out


def accumulation_distribution(bars: Sequence[Bar]) -> Series:
    out: Series = []
    total = 0.0
    for bar in bars:
        span = bar.high - bar.low
        if span > 0:
            total += ((bar.close - bar.low) - (bar.high - bar.close)) / span * bar.volume
        out.append(total)
    return out


# --------------------------------------------------------------------------- drawing


@dataclass(frozen=True)
class Theme:
    background: RGB
    grid: RGB
    text: RGB
    separator: RGB
    up: RGB
    down: RGB
    caption_bg: RGB


DARK = Theme(
    (19, 23, 34),
    (38, 42, 54),
    (178, 181, 190),
    (67, 70, 81),
    (38, 166, 154),
    (239, 83, 80),
    (42, 46, 57),
)
LIGHT = Theme(
    (255, 255, 255),
    (240, 243, 250),
    (19, 23, 34),
    (209, 212, 220),
    (8, 153, 129),
    (242, 54, 69),
    (240, 243, 250),
)

BLUE: RGB = (41, 98, 255)
ORANGE: RGB = (255, 152, 0)
DEEP_ORANGE: RGB = (255, 109, 0)
PURPLE: RGB = (126, 87, 194)
TEAL: RGB = (0, 150, 136)
LINE_COLORS: tuple[RGB, ...] = (BLUE, ORANGE, PURPLE, TEAL, (233, 30, 99))

CAPTION_H = 20
AXIS_W = 66
TIME_AXIS_H = 18
OVERLAY_STUDIES = {
    "Moving Average Exponential",
    "Moving Average",
    "Bollinger Bands",
    "Parabolic SAR",
}
PANE_STUDIES = {"Relative Strength Index", "MACD", "Accumulation/Distribution", "Volume"}


def blend(color: RGB, background: RGB, alpha: float) -> RGB:
    r, g, b = (round(c * alpha + bg * (1.0 - alpha)) for c, bg in zip(color, background, strict=True))
    return (r, g, b)


def parse_rgb(value: object, default: RGB) -> RGB:
    if isinstance(value, str):
        match = re.fullmatch(r"\s*rgba?\((\d+),\s*(\d+),\s*(\d+)(?:,\s*[\d.]+)?\)\s*", value)
        if match:
            r, g, b = (min(int(x), 255) for x in match.groups())
            return (r, g, b)
        match = re.fullmatch(r"\s*#([0-9a-fA-F]{6})\s*", value)
        if match:
            raw = int(match.group(1), 16)
            return ((raw >> 16) & 255, (raw >> 8) & 255, raw & 255)
    return default


def number_input(inputs: Mapping[str, Any], keys: Sequence[str], default: float) -> float:
    """First numeric input among `keys` (CHART-IMG uses `in_N` for built-ins, names for Pine)."""
    for key in keys:
        value = inputs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return default


def format_value(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.1f}M"
    if magnitude >= 1e4:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:,.1f}"
    return f"{value:.2f}"


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def time_label(moment: datetime, intraday: bool) -> str:
    """`17 Nov 12:00` or `17 Nov 2026`; not strftime("%b"), which follows the locale."""
    day = f"{moment.day} {MONTHS[moment.month - 1]}"
    return f"{day} {moment:%H:%M}" if intraday else f"{day} {moment.year}"


class Canvas:
    """Pillow drawing helpers: text with a font fallback, dashed lines, translucent fills."""

    def __init__(self, width: int, height: int, theme: Theme) -> None:
        self.image = Image.new("RGBA", (width, height), (*theme.background, 255))
        self.draw = ImageDraw.Draw(self.image)
        self.theme = theme
        try:
            self.font: ImageFont.FreeTypeFont | ImageFont.ImageFont = ImageFont.load_default(size=11)
            self.unicode_ok = True
        except (ImportError, OSError, TypeError):  # Pillow without FreeType: bitmap font
            self.font = ImageFont.load_default()
            self.unicode_ok = False

    def text(self, xy: tuple[float, float], text: str, fill: RGB, anchor: str = "la") -> float:
        """Draws `text`; returns the x just after it."""
        if not self.unicode_ok:
            text = text.replace("·", "|").encode("ascii", "replace").decode()
        self.draw.text(xy, text, fill=fill, font=self.font, anchor=anchor)
        return xy[0] + self.draw.textlength(text, font=self.font)

    def dashed_hline(self, x0: float, x1: float, y: float, fill: RGB, dash: int = 4) -> None:
        x = x0
        while x < x1:
            self.draw.line([(x, y), (min(x + dash, x1), y)], fill=fill, width=1)
            x += 2 * dash

    def translucent_polygon(self, points: Sequence[tuple[float, float]], fill: RGB, alpha: int) -> None:
        overlay = Image.new("RGBA", self.image.size, (0, 0, 0, 0))
        ImageDraw.Draw(overlay).polygon(list(points), fill=(*fill, alpha))
        self.image.alpha_composite(overlay)
        self.draw = ImageDraw.Draw(self.image)

    def to_png(self, colors: int = 128) -> bytes:
        paletted = self.image.convert("RGB").quantize(
            colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
        buffer = io.BytesIO()
        paletted.save(buffer, format="PNG", optimize=True)
        return buffer.getvalue()


@dataclass
class Pane:
    top: float
    bottom: float
    low: float
    high: float

    def y(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.bottom - (value - self.low) / span * (self.bottom - self.top)


def value_range(*series: Series, pad: float = 0.06) -> tuple[float, float]:
    values = [v for s in series for v in s if v is not None]
    low, high = min(values), max(values)
    margin = (high - low) * pad or abs(high) * 0.01 or 1.0
    return low - margin, high + margin


@dataclass(frozen=True)
class Overlay:
    """A study drawn on the price pane."""

    label: str
    color: RGB
    paint: Callable[[Pane], None]
    series: list[Series]  # values that must fit in the price range
    behind_candles: bool = False


@dataclass(frozen=True)
class ChartSpec:
    chart_img_symbol: str
    timeframe: str
    template_id: str
    width: int
    height: int
    theme: Theme
    style: str
    studies: tuple[Mapping[str, Any], ...]
    layout_id: str | None = None  # a layout template's: named in the caption


class ChartRenderer:
    def __init__(self, spec: ChartSpec, bars: Sequence[Bar]) -> None:
        self.spec = spec
        self.bars = bars
        self.closes = [bar.close for bar in bars]
        self.canvas = Canvas(spec.width, spec.height, spec.theme)
        self.left = 6.0
        self.right = spec.width - AXIS_W
        self.bar_w = (self.right - self.left) / len(bars)
        self.line_colors = iter(LINE_COLORS * 4)

    def x(self, index: int) -> float:
        return self.left + (index + 0.5) * self.bar_w

    # --- layout ---------------------------------------------------------------------

    def render(self) -> bytes:
        spec, theme = self.spec, self.spec.theme
        overlays = [s for s in spec.studies if self._is_overlay(s)]
        panes = [s for s in spec.studies if not self._is_overlay(s) and s.get("name") in PANE_STUDIES]
        skipped = [
            str(s.get("name"))
            for s in spec.studies
            if not self._is_overlay(s) and s.get("name") not in PANE_STUDIES
        ]

        plot_top, plot_bottom = CAPTION_H + 4.0, spec.height - TIME_AXIS_H
        pane_h = (plot_bottom - plot_top) * (0.22 if len(panes) == 1 else 0.19)
        main_bottom = plot_bottom - pane_h * len(panes)

        self._caption()
        self._time_axis(plot_top, plot_bottom)
        main = self._main_pane(plot_top, main_bottom, overlays, skipped)
        for i, study in enumerate(panes):
            top = main_bottom + i * pane_h
            self.canvas.draw.line([(0, top), (spec.width, top)], fill=theme.separator, width=1)
            self._lower_pane(study, top + 3, top + pane_h - 3)
        self.canvas.draw.line(
            [(self.right, CAPTION_H), (self.right, plot_bottom)], fill=theme.separator, width=1
        )
        self._last_price_tag(main)
        return self.canvas.to_png()

    @staticmethod
    def _is_overlay(study: Mapping[str, Any]) -> bool:
        name = study.get("name")
        return name in OVERLAY_STUDIES or (name == "Volume" and bool(study.get("forceOverlay")))

    def _caption(self) -> None:
        spec, theme = self.spec, self.spec.theme
        self.canvas.draw.rectangle([(0, 0), (spec.width, CAPTION_H)], fill=theme.caption_bg)
        caption = (
            # the bundled font has no em dash glyph: plain hyphen
            f"SYNTHETIC DATA - stand-in for CHART-IMG output · {spec.chart_img_symbol} · "
            f"{spec.timeframe} · {spec.template_id}"
        )
        if spec.layout_id is not None:
            caption += f" · layout {spec.layout_id}"
        self.canvas.text((6, CAPTION_H / 2), caption, theme.text, anchor="lm")

    def _time_axis(self, top: float, bottom: float) -> None:
        theme = self.spec.theme
        intraday = INTERVAL_MINUTES[self.spec.timeframe] < 1440
        for i in range(12, len(self.bars), 24):  # bars start at 00:00
            x = self.x(i)
            self.canvas.draw.line([(x, top), (x, bottom)], fill=theme.grid, width=1)
            self.canvas.text(
                (x, bottom + TIME_AXIS_H / 2),
                time_label(self.bars[i].time, intraday),
                theme.text,
                anchor="mm",
            )

    def _grid(self, pane: Pane, levels: Sequence[float]) -> None:
        theme = self.spec.theme
        for level in levels:
            y = pane.y(level)
            self.canvas.draw.line([(self.left, y), (self.right, y)], fill=theme.grid, width=1)
            self.canvas.text((self.right + 6, y), format_value(level), theme.text, anchor="lm")

    @staticmethod
    def _nice_levels(low: float, high: float, count: int) -> list[float]:
        raw = (high - low) / count
        magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
        step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
        first = math.ceil(low / step) * step
        return [first + k * step for k in range(count + 2) if first + k * step < high]

    # --- main pane ------------------------------------------------------------------

    def _main_pane(
        self,
        top: float,
        bottom: float,
        overlays: Sequence[Mapping[str, Any]],
        skipped: Sequence[str],
    ) -> Pane:
        theme = self.spec.theme
        drawn = [self._overlay(study) for study in overlays]
        low, high = value_range(
            [b.low for b in self.bars],
            [b.high for b in self.bars],
            *(s for overlay in drawn for s in overlay.series),
        )
        pane = Pane(top + 16, bottom - 4, low, high)
        self._grid(pane, self._nice_levels(low, high, 6))
        for overlay in drawn:  # volume: behind the candles
            if overlay.behind_candles:
                overlay.paint(pane)
        self._candles(pane)
        for overlay in drawn:
            if not overlay.behind_candles:
                overlay.paint(pane)

        x = self.canvas.text(
            (self.left + 2, top + 2),
            f"{self.spec.chart_img_symbol} · {self.spec.timeframe}  ",
            theme.text,
        )
        for overlay in drawn:
            x = self.canvas.text((x, top + 2), overlay.label + "  ", overlay.color)
        if skipped:
            self.canvas.text((x, top + 2), "(not drawn: " + ", ".join(skipped) + ")", theme.text)
        return pane

    def _candles(self, pane: Pane) -> None:
        theme, draw = self.spec.theme, self.canvas.draw
        if self.spec.style not in {"candle", "hollowCandle", "heikinAshi", "bar", "hiLo"}:
            points = [(self.x(i), pane.y(c)) for i, c in enumerate(self.closes)]
            draw.line(points, fill=BLUE, width=2)
            return
        body = max(1.0, self.bar_w * 0.62)
        for i, bar in enumerate(self.bars):
            color = theme.up if bar.close >= bar.open else theme.down
            x = self.x(i)
            draw.line([(x, pane.y(bar.high)), (x, pane.y(bar.low))], fill=color, width=1)
            y0, y1 = sorted((pane.y(bar.open), pane.y(bar.close)))
            draw.rectangle([(x - body / 2, y0), (x + body / 2, max(y1, y0 + 1))], fill=color)

    def _overlay(self, study: Mapping[str, Any]) -> Overlay:
        name = str(study.get("name"))
        inputs: Mapping[str, Any] = study.get("input") or {}
        override: Mapping[str, Any] = study.get("override") or {}
        draw = self.canvas.draw
        if name in {"Moving Average Exponential", "Moving Average"}:
            length = int(number_input(inputs, ("length", "in_0"), 9))
            color = parse_rgb(override.get("Plot.color"), next(self.line_colors))
            width = int(number_input(override, ("Plot.linewidth",), 1))
            values = ema(self.closes, length) if "Exponential" in name else sma(self.closes, length)
            label = f"{'EMA' if 'Exponential' in name else 'MA'} {length}"
            return Overlay(label, color, lambda pane: self._polyline(pane, values, color, width), [values])
        if name == "Bollinger Bands":
            length = int(number_input(inputs, ("in_0", "length"), 20))
            mult = number_input(inputs, ("in_1", "mult"), 2.0)
            basis, upper, lower = bollinger(self.closes, length, mult)

            def paint_bands(pane: Pane) -> None:
                idx = [i for i, u in enumerate(upper) if u is not None]
                top_edge = [(self.x(i), pane.y(upper[i] or 0.0)) for i in idx]
                bottom_edge = [(self.x(i), pane.y(lower[i] or 0.0)) for i in reversed(idx)]
                self.canvas.translucent_polygon(top_edge + bottom_edge, BLUE, 28)
                self._polyline(pane, upper, BLUE, 1)
                self._polyline(pane, lower, BLUE, 1)
                self._polyline(pane, basis, DEEP_ORANGE, 1)

            return Overlay(f"BB {length} {mult:g}", BLUE, paint_bands, [upper, lower])
        if name == "Parabolic SAR":
            start = number_input(inputs, ("in_0", "start"), 0.02)
            increment = number_input(inputs, ("in_1", "increment"), 0.02)
            maximum = number_input(inputs, ("in_2", "maximum"), 0.2)
            values = parabolic_sar(self.bars, start, increment, maximum)

            def paint_dots(pane: Pane) -> None:
                for i, v in enumerate(values):
                    if v is not None:
                        x, y = self.x(i), pane.y(v)
                        draw.ellipse([(x - 1.6, y - 1.6), (x + 1.6, y + 1.6)], fill=ORANGE)

            return Overlay(f"SAR {start:g} {increment:g} {maximum:g}", ORANGE, paint_dots, [values])
        # Volume drawn over the bottom fifth of the price pane
        volumes = [bar.volume for bar in self.bars]

        def paint_volume(pane: Pane) -> None:
            theme = self.spec.theme
            height = (pane.bottom - pane.top) * 0.2
            peak = max(volumes)
            half = max(1.0, self.bar_w * 0.62) / 2
            for i, bar in enumerate(self.bars):
                color = blend(theme.up if bar.close >= bar.open else theme.down, theme.background, 0.35)
                y = pane.bottom - bar.volume / peak * height
                draw.rectangle([(self.x(i) - half, y), (self.x(i) + half, pane.bottom)], fill=color)

        return Overlay(
            f"Vol {format_value(volumes[-1])}",
            self.spec.theme.text,
            paint_volume,
            [],
            behind_candles=True,
        )

    def _polyline(self, pane: Pane, values: Series, color: RGB, width: int) -> None:
        points = [(self.x(i), pane.y(v)) for i, v in enumerate(values) if v is not None]
        if len(points) > 1:
            self.canvas.draw.line(points, fill=color, width=width, joint="curve")

    def _last_price_tag(self, pane: Pane) -> None:
        last = self.bars[-1]
        color = self.spec.theme.up if last.close >= last.open else self.spec.theme.down
        y = pane.y(last.close)
        self.canvas.dashed_hline(self.left, self.right, y, color)
        self.canvas.draw.rectangle([(self.right + 1, y - 7), (self.spec.width - 1, y + 7)], fill=color)
        self.canvas.text((self.right + 6, y), format_value(last.close), (255, 255, 255), anchor="lm")

    # --- lower panes ----------------------------------------------------------------

    def _lower_pane(self, study: Mapping[str, Any], top: float, bottom: float) -> None:
        name = str(study.get("name"))
        inputs: Mapping[str, Any] = study.get("input") or {}
        theme, draw = self.spec.theme, self.canvas.draw
        label_y = top + 1
        if name == "Relative Strength Index":
            length = int(number_input(inputs, ("length", "in_0"), 14))
            values = rsi(self.closes, length)
            pane = Pane(top + 14, bottom, 0.0, 100.0)
            band = [
                (self.left, pane.y(70)),
                (self.right, pane.y(70)),
                (self.right, pane.y(30)),
                (self.left, pane.y(30)),
            ]
            self.canvas.translucent_polygon(band, PURPLE, 22)
            for level in (70.0, 50.0, 30.0):
                self.canvas.dashed_hline(self.left, self.right, pane.y(level), theme.separator)
                self.canvas.text((self.right + 6, pane.y(level)), f"{level:.0f}", theme.text, "lm")
            self._polyline(pane, values, PURPLE, 1)
            last = next(v for v in reversed(values) if v is not None)
            self.canvas.text((self.left + 2, label_y), f"RSI {length}  {last:.2f}", PURPLE)
        elif name == "MACD":
            fast = int(number_input(inputs, ("in_0", "fastLength", "fast_length"), 12))
            slow = int(number_input(inputs, ("in_1", "slowLength", "slow_length"), 26))
            signal = int(number_input(inputs, ("in_2", "signalLength", "signal_length"), 9))
            line, signal_line, hist = macd(self.closes, fast, slow, signal)
            low, high = value_range(line, signal_line, hist, [0.0])
            pane = Pane(top + 14, bottom, low, high)
            zero = pane.y(0.0)
            half = max(1.0, self.bar_w * 0.62) / 2
            previous = 0.0
            for i, h in enumerate(hist):
                if h is None:
                    continue
                base = theme.up if h >= 0 else theme.down
                color = base if abs(h) >= abs(previous) else blend(base, theme.background, 0.45)
                draw.rectangle(
                    [
                        (self.x(i) - half, min(zero, pane.y(h))),
                        (self.x(i) + half, max(zero, pane.y(h))),
                    ],
                    fill=color,
                )
                previous = h
            self.canvas.dashed_hline(self.left, self.right, zero, theme.separator)
            self._polyline(pane, line, BLUE, 1)
            self._polyline(pane, signal_line, DEEP_ORANGE, 1)
            for level in (high - (high - low) * 0.1, low + (high - low) * 0.1):
                self.canvas.text((self.right + 6, pane.y(level)), format_value(level), theme.text, "lm")
            x = self.canvas.text((self.left + 2, label_y), f"MACD {fast} {slow} {signal}  ", BLUE)
            self.canvas.text((x, label_y), "signal", DEEP_ORANGE)
        elif name == "Accumulation/Distribution":
            values = accumulation_distribution(self.bars)
            low, high = value_range(values)
            pane = Pane(top + 14, bottom, low, high)
            for level in (high - (high - low) * 0.1, low + (high - low) * 0.1):
                self.canvas.dashed_hline(self.left, self.right, pane.y(level), theme.grid)
                self.canvas.text((self.right + 6, pane.y(level)), format_value(level), theme.text, "lm")
            self._polyline(pane, values, TEAL, 1)
            self.canvas.text((self.left + 2, label_y), f"Accum/Dist  {format_value(values[-1])}", TEAL)
        else:  # Volume in its own pane
            volumes = [bar.volume for bar in self.bars]
            pane = Pane(top + 14, bottom, 0.0, max(volumes))
            half = max(1.0, self.bar_w * 0.62) / 2
            for i, bar in enumerate(self.bars):
                color = blend(theme.up if bar.close >= bar.open else theme.down, theme.background, 0.6)
                draw.rectangle(
                    [(self.x(i) - half, pane.y(bar.volume)), (self.x(i) + half, bottom)], fill=color
                )
            self.canvas.text((self.left + 2, label_y), f"Volume  {format_value(volumes[-1])}", theme.text)


# --------------------------------------------------------------------------- CLI


@dataclass(frozen=True)
class Fixture:
    template_id: str
    chart_img_symbol: str
    file_name: str  # inside the fixtures root: the endpoint's folder, then the fixture's name
    png: bytes


def render_template(template: Mapping[str, Any], symbol: str, timeframe: str) -> Fixture:
    template_id = str(template["id"])
    chart_img_symbol = str(template["chartImgSymbolTemplate"]).replace("{symbol}", symbol)
    layout: Mapping[str, Any] | None = template.get("layout")
    request: Mapping[str, Any] = (template.get("request") if layout is None else layout.get("request")) or {}
    spec = ChartSpec(
        chart_img_symbol=chart_img_symbol,
        timeframe=timeframe,
        template_id=template_id,
        width=int(request.get("width", 800)),
        height=int(request.get("height", 600)),
        theme=LIGHT if request.get("theme") == "light" else DARK,
        style=str(request.get("style", "candle")),
        studies=tuple(request.get("studies") or ()),
        layout_id=None if layout is None else str(layout["layoutId"]),
    )
    # One market per (symbol, timeframe): every template of it shows the same candles.
    rng = seeded_rng(f"{chart_img_symbol}|{timeframe}")
    bars = synthetic_bars(rng, BAR_COUNT, timedelta(minutes=INTERVAL_MINUTES[timeframe]))
    png = ChartRenderer(spec, bars).render()
    folder = FIXTURE_DIRS["advanced-chart" if layout is None else "layout-chart"]
    name = f"{folder}/{success_fixture_name(fixture_key(chart_img_symbol, timeframe, template_id))}"
    return Fixture(template_id, chart_img_symbol, name, png)


def load_templates(templates_dir: Path) -> list[dict[str, Any]]:
    templates: list[dict[str, Any]] = []
    for path in sorted(templates_dir.glob("*.json")):
        template = json.loads(path.read_text(encoding="utf-8"))
        if template.get("id") != path.stem:
            raise ValueError(f"{path}: id {template.get('id')!r} does not match the file name")
        if "{symbol}" not in str(template.get("chartImgSymbolTemplate", "")):
            raise ValueError(f"{path}: chartImgSymbolTemplate must contain {{symbol}}")
        templates.append(template)
    if not templates:
        raise ValueError(f"no *.json templates in {templates_dir}")
    return templates


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--templates-dir",
        type=Path,
        default=DEFAULT_TEMPLATES_DIR,
        help="directory of chart templates (<id>.json)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help="the fixtures root: <endpoint folder>/<SYMBOL>__<timeframe>__<templateId>.png below it",
    )
    parser.add_argument(
        "--symbol",
        default="BTCUSDT",
        help="base symbol (flow_run scope.symbol) put into each template's "
        "chartImgSymbolTemplate, e.g. BTCUSDT -> BINANCE:BTCUSDT",
    )
    parser.add_argument(
        "--timeframe", default="1h", choices=list(INTERVAL_MINUTES), help="CHART-IMG interval"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a fixture is missing or differs",
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Z0-9][A-Z0-9._-]{0,31}", args.symbol):
        parser.error(f"--symbol {args.symbol!r} is not a base symbol like BTCUSDT")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        templates = load_templates(args.templates_dir)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = 0
    for template in templates:
        fixture = render_template(template, args.symbol, args.timeframe)
        path = args.out_dir / fixture.file_name
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
        current = path.read_bytes() if path.exists() else None
        if current == fixture.png:
            print(f"unchanged  {path} ({len(fixture.png)} bytes)")
        elif args.check:
            stale += 1
            print(f"STALE      {path}", file=sys.stderr)
        else:
            path.write_bytes(fixture.png)
            print(f"wrote      {path} ({len(fixture.png)} bytes)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
