"""Small, dependency-free SVG charts for the weekly report (jobs/analytics/report.py).

Every function returns an ``<svg>`` element as a string, to be inlined in HTML: no scripts, no
external resources, native ``<title>`` tooltips. Sizes are in CSS pixels; the SVGs scale with
``width: 100%`` through their viewBox.
"""
from __future__ import annotations

import html
import itertools
import math
from collections.abc import Iterable, Sequence

FONT = "font-family: system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif"
PALETTE = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00",
           "#b82e2e", "#316395", "#994499", "#22aa99", "#aaaa11", "#6633cc", "#e67300", "#8b0707"]
GREY = "#888"
AXIS = "#444"
GRID = "#e5e5e5"


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def color_for(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def fmt_ms(ms: float | None) -> str:
    """An axis or tooltip duration (ms in): auto-scaled µs / ms / s as the report's tables."""
    if ms is None:
        return "-"
    if ms == 0:
        return "0"
    from tailscope.jobs.analytics.stats import fmt_duration

    return fmt_duration(ms)


def heat(t: float) -> str:
    """Green (0) → yellow (0.5) → red (1)."""
    t = min(1.0, max(0.0, t))
    stops = [(0.0, (26, 152, 80)), (0.5, (254, 224, 76)), (1.0, (215, 48, 39))]
    for (t0, c0), (t1, c1) in itertools.pairwise(stops):
        if t <= t1:
            f = (t - t0) / (t1 - t0) if t1 > t0 else 0
            r, g, b = (round(a + (b_ - a) * f) for a, b_ in zip(c0, c1))
            return f"#{r:02x}{g:02x}{b:02x}"
    return "#d73027"


def _legend_width(names: Iterable[str]) -> int:
    return max(120, 7 * max((len(n) for n in names), default=0) + 40)


def _svg(width: int, height: int, body: Iterable[str], label: str) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(label)}" style="max-width: 100%; height: auto; {FONT}">'
        f"<title>{esc(label)}</title>" + "".join(body) + "</svg>"
    )


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


def _log_ticks(lo: float, hi: float) -> list[float]:
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo <= v <= hi:
                out.append(v)
    return out or [lo, hi]


# ----------------------------------------------------------------------------------------------


def bar_chart(items: Sequence[dict], *, title: str, unit_fmt=fmt_ms, width: int = 760) -> str:
    """Horizontal bars: items are {label, value, previous (optional), note (optional)}; a
    previous-week value is drawn as a black tick with the change beside the bar."""
    items = [i for i in items if i.get("value") is not None]
    if not items:
        return empty_chart(title, width)
    bar_h, gap, left, top = 22, 8, 190, 28
    right = max(120, 7 * max(len(str(i.get("note") or "")) + 16 for i in items))
    height = top + len(items) * (bar_h + gap) + 30
    vmax = max(max(i["value"], i.get("previous") or 0) for i in items) or 1
    plot_w = width - left - right
    x = lambda v: left + plot_w * v / vmax
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    for t in _nice_ticks(0, vmax, 5):
        if t <= vmax:
            body.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{height - 26}" stroke="{GRID}"/>')
            body.append(f'<text x="{x(t):.1f}" y="{height - 12}" font-size="11" text-anchor="middle" fill="{GREY}">{esc(unit_fmt(t))}</text>')
    for n, it in enumerate(items):
        y = top + n * (bar_h + gap)
        v, prev = it["value"], it.get("previous")
        tip = f"{it['label']}: {unit_fmt(v)}" + (f" (previous week {unit_fmt(prev)})" if prev is not None else "")
        body.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" font-size="12" text-anchor="end" fill="{AXIS}">{esc(it["label"])}</text>')
        body.append(f'<rect x="{left}" y="{y}" width="{max(1.0, x(v) - left):.1f}" height="{bar_h}" fill="{it.get("color", PALETTE[0])}" rx="2">'
                    f"<title>{esc(tip)}</title></rect>")
        label = unit_fmt(v)
        if prev is not None:
            body.append(f'<line x1="{x(prev):.1f}" y1="{y - 3}" x2="{x(prev):.1f}" y2="{y + bar_h + 3}" stroke="#000" stroke-width="2">'
                        f"<title>previous week: {esc(unit_fmt(prev))}</title></line>")
            if prev:
                change = v / prev - 1
                label += f"  ({'+' if change >= 0 else ''}{change * 100:.0f} %)"
        if it.get("note"):
            label += f"  {it['note']}"
        body.append(f'<text x="{max(x(v), x(prev or 0)) + 6:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="11" fill="{AXIS}">{esc(label)}</text>')
    return _svg(width, height, body, title)


def _pct_fmt(v: float) -> str:
    return f"{v * 100:.0f} %"


def interval_chart(items: Sequence[dict], *, title: str, width: int = 760, value_fmt=_pct_fmt) -> str:
    """A dot per item at its value with a whisker over its interval (a forest plot): items are
    {label, value, low, high, dim (optional: drawn hollow and grey, e.g. a small sample), color
    (optional), note}; values are fractions drawn as percent unless value_fmt says otherwise (e.g.
    fmt_ms for changes in ms), with the 0 line marked."""
    items = [i for i in items if i.get("value") is not None]
    if not items:
        return empty_chart(title, width)
    row_h, left, top = 24, 190, 28
    right = max(120, 7 * max(len(str(i.get("note") or "")) + 2 for i in items))
    height = top + len(items) * row_h + 30
    ends = [v for i in items for v in (i["value"], i.get("low"), i.get("high")) if v is not None]
    lo, hi = min(0.0, *ends), max(0.0, *ends)
    pad = (hi - lo) * 0.05 or 0.1
    lo, hi = lo - pad, hi + pad
    plot_w = width - left - right
    x = lambda v: left + plot_w * (v - lo) / (hi - lo)
    base_y = top + len(items) * row_h
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    for t in _nice_ticks(lo, hi, 6):
        stroke = AXIS if t == 0 else GRID
        body.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{base_y}" stroke="{stroke}"/>')
        body.append(f'<text x="{x(t):.1f}" y="{base_y + 14}" font-size="11" text-anchor="middle" fill="{GREY}">{esc(value_fmt(t))}</text>')
    for n, it in enumerate(items):
        y = top + n * row_h + row_h / 2
        color = GREY if it.get("dim") else it.get("color", PALETTE[0])
        body.append(f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end" fill="{AXIS}">{esc(it["label"])}</text>')
        tip = f"{it['label']}: {value_fmt(it['value'])}"
        if it.get("low") is not None and it.get("high") is not None:
            tip += f" [{value_fmt(it['low'])}, {value_fmt(it['high'])}]"
            body.append(f'<line x1="{x(it["low"]):.1f}" y1="{y:.1f}" x2="{x(it["high"]):.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="2"/>')
            for end in (it["low"], it["high"]):
                body.append(f'<line x1="{x(end):.1f}" y1="{y - 5:.1f}" x2="{x(end):.1f}" y2="{y + 5:.1f}" stroke="{color}" stroke-width="2"/>')
        fill = "#fff" if it.get("dim") else color
        body.append(f'<circle cx="{x(it["value"]):.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{color}" stroke-width="2">'
                    f"<title>{esc(tip + ('; ' + it['note'] if it.get('note') else ''))}</title></circle>")
        if it.get("note"):
            body.append(f'<text x="{width - right + 8}" y="{y + 4:.1f}" font-size="11" fill="{AXIS}">{esc(it["note"])}</text>')
    return _svg(width, height, body, title)


def stacked_share_bars(rows: Sequence[dict], *, title: str, width: int = 760, colors: dict[str, str] | None = None) -> str:
    """One bar per row ({label, parts: [(name, share 0..1)], note}): the shares of a total, e.g. of
    the p99 tail's latency by part of the time budget (they sum to 1). Should parts add up to more
    than 1, the bar is drawn to its sum with the 100 % line marked. colors: a fixed colour per part
    name (the same part the same colour in every chart); others from the palette."""
    rows = [r for r in rows if r.get("parts")]
    if not rows:
        return empty_chart(title, width)
    names: list[str] = []
    for r in rows:
        for name, _ in r["parts"]:
            if name not in names:
                names.append(name)
    colors = {n: (colors or {}).get(n) or color_for(i) for i, n in enumerate(names)}
    bar_h, gap, left, right, top = 22, 8, 190, 30, 28
    # legend columns as wide as the longest name needs (about 6.5 px a character at 11 px)
    per_row = max(1, min(4, int((width - 20) // (6.5 * max(len(n) for n in names) + 24))))
    legend_rows = math.ceil(len(names) / per_row)
    height = top + len(rows) * (bar_h + gap) + 24 + legend_rows * 18 + 8
    smax = max(1.0, max(sum(s for _, s in r["parts"]) for r in rows))
    plot_w = width - left - right
    x = lambda v: left + plot_w * v / smax
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    base_y = top + len(rows) * (bar_h + gap)
    # ticks a label's width apart at least, whatever the largest sum (overlapping charges can
    # reach several times the tail's latency), and the 100 % line always
    ticks = sorted({t for t in _nice_ticks(0, smax) if t <= smax} | {1.0})
    ticks = [t for i, t in enumerate(ticks) if t == 1.0 or all(abs(x(t) - x(u)) >= 42 for u in ticks[:i] + [1.0] if u != t)]
    for t in ticks:
        dash = ' stroke-dasharray="4 3"' if t == 1 else ""
        body.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{base_y}" stroke="{GRID if t != 1 else AXIS}"{dash}/>')
        body.append(f'<text x="{x(t):.1f}" y="{base_y + 14}" font-size="11" text-anchor="middle" fill="{GREY}">{t * 100:.0f} %</text>')
    for n, r in enumerate(rows):
        y = top + n * (bar_h + gap)
        body.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" font-size="12" text-anchor="end" fill="{AXIS}">{esc(r["label"])}</text>')
        acc = 0.0
        for name, share in r["parts"]:
            if share <= 0:
                continue
            body.append(f'<rect x="{x(acc):.1f}" y="{y}" width="{max(0.5, x(acc + share) - x(acc)):.1f}" height="{bar_h}" '
                        f'fill="{colors[name]}"><title>{esc(r["label"])} — {esc(name)}: {share * 100:.1f} %</title></rect>')
            acc += share
    ly = base_y + 30
    for i, name in enumerate(names):
        lx = 20 + (i % per_row) * ((width - 20) / per_row)
        yy = ly + (i // per_row) * 18
        body.append(f'<rect x="{lx:.1f}" y="{yy - 10}" width="12" height="12" fill="{colors[name]}"/>'
                    f'<text x="{lx + 16:.1f}" y="{yy}" font-size="11" fill="{AXIS}">{esc(name)}</text>')
    return _svg(width, int(height), body, title)


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, y_fmt=fmt_ms, log_y: bool = False,
               x_labels: Sequence[tuple[float, str]] = (), x_range: tuple[float, float] | None = None,
               width: int = 760, height: int = 260, colors: Sequence[str] | None = None) -> str:
    """Lines (with points) of (x, y) per series name; x are numbers (e.g. epoch seconds) with
    their tick labels in x_labels; x_range fixes the axis (else the data's)."""
    pts = [(x, y) for s in series.values() for x, y in s if y is not None and (y > 0 or not log_y)]
    if not pts:
        return empty_chart(title, width)
    left, right, top, bottom = 70, _legend_width(series), 28, 34
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = x_range or (min(xs), max(xs))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if log_y:
        y0, y1 = min(ys) / 1.5, max(ys) * 1.5
        ty = lambda v: math.log10(v)
        ticks = _log_ticks(y0, y1)
    else:
        y0, y1 = 0.0, max(ys) * 1.1 or 1
        ty = lambda v: v
        ticks = _nice_ticks(y0, y1)
    pw, ph = width - left - right, height - top - bottom
    X = lambda v: left + pw * (v - x0) / (x1 - x0)
    Y = lambda v: top + ph * (1 - (ty(v) - ty(y0)) / (ty(y1) - ty(y0)))
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    for t in ticks:
        if y0 <= t <= y1:
            body.append(f'<line x1="{left}" y1="{Y(t):.1f}" x2="{left + pw}" y2="{Y(t):.1f}" stroke="{GRID}"/>')
            body.append(f'<text x="{left - 6}" y="{Y(t) + 4:.1f}" font-size="11" text-anchor="end" fill="{GREY}">{esc(y_fmt(t))}</text>')
    for xv, label in x_labels:
        if x0 <= xv <= x1:
            body.append(f'<line x1="{X(xv):.1f}" y1="{top}" x2="{X(xv):.1f}" y2="{top + ph}" stroke="{GRID}"/>')
            body.append(f'<text x="{X(xv):.1f}" y="{height - 14}" font-size="11" text-anchor="middle" fill="{GREY}">{esc(label)}</text>')
    body.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="{AXIS}"/>')
    for i, (name, s) in enumerate(series.items()):
        s = [(x, y) for x, y in s if y is not None and (y > 0 or not log_y)]
        if not s:
            continue
        c = colors[i] if colors else color_for(i)
        if len(s) > 1:
            path = " ".join(f"{'M' if j == 0 else 'L'}{X(x):.1f},{Y(y):.1f}" for j, (x, y) in enumerate(s))
            body.append(f'<path d="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in s:
            body.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{c}"><title>{esc(name)}: {esc(y_fmt(y))}</title></circle>')
        body.append(f'<rect x="{width - right + 12}" y="{top + i * 18}" width="12" height="12" fill="{c}"/>'
                    f'<text x="{width - right + 28}" y="{top + i * 18 + 10}" font-size="11" fill="{AXIS}">{esc(name)}</text>')
    return _svg(width, height, body, title)


def cdf_chart(series: dict[str, list[tuple[float, float]]], *, title: str, width: int = 760, height: int = 280,
              colors: Sequence[str] | None = None) -> str:
    """Cumulative distributions: per series, (value in ms, fraction ≤ it) points; log x axis."""
    pts = [(v, f) for s in series.values() for v, f in s if v and v > 0]
    if not pts:
        return empty_chart(title, width)
    left, right, top, bottom = 50, _legend_width(series), 28, 36
    v0, v1 = min(p[0] for p in pts) / 1.3, max(p[0] for p in pts) * 1.3
    pw, ph = width - left - right, height - top - bottom
    X = lambda v: left + pw * (math.log10(v) - math.log10(v0)) / (math.log10(v1) - math.log10(v0))
    Y = lambda f: top + ph * (1 - f)
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    for f in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(f'<line x1="{left}" y1="{Y(f):.1f}" x2="{left + pw}" y2="{Y(f):.1f}" stroke="{GRID}"/>')
        body.append(f'<text x="{left - 6}" y="{Y(f) + 4:.1f}" font-size="11" text-anchor="end" fill="{GREY}">{f * 100:g}%</text>')
    for f, name in ((0.95, "p95"), (0.99, "p99")):
        body.append(f'<line x1="{left}" y1="{Y(f):.1f}" x2="{left + pw}" y2="{Y(f):.1f}" stroke="#bbb" stroke-dasharray="3 3"/>')
        body.append(f'<text x="{left + 4}" y="{Y(f) + (11 if f == 0.95 else -3):.1f}" font-size="11" fill="{GREY}">{name}</text>')
    for t in _log_ticks(v0, v1):
        body.append(f'<line x1="{X(t):.1f}" y1="{top}" x2="{X(t):.1f}" y2="{top + ph}" stroke="{GRID}"/>')
        body.append(f'<text x="{X(t):.1f}" y="{height - 16}" font-size="11" text-anchor="middle" fill="{GREY}">{esc(fmt_ms(t))}</text>')
    body.append(f'<text x="{left + pw / 2:.1f}" y="{height - 2}" font-size="11" text-anchor="middle" fill="{GREY}">query latency (log scale)</text>')
    for i, (name, s) in enumerate(series.items()):
        s = sorted((v, f) for v, f in s if v and v > 0)
        if not s:
            continue
        c = colors[i] if colors else color_for(i)
        path = [f"M{X(s[0][0]):.1f},{Y(0):.1f}"]
        prev_f = 0.0
        for v, f in s:  # a step function: the fraction jumps at each observed value
            path.append(f"L{X(v):.1f},{Y(prev_f):.1f} L{X(v):.1f},{Y(f):.1f}")
            prev_f = f
        body.append(f'<path d="{" ".join(path)}" fill="none" stroke="{c}" stroke-width="2"><title>{esc(name)}</title></path>')
        body.append(f'<rect x="{width - right + 12}" y="{top + i * 18}" width="12" height="12" fill="{c}"/>'
                    f'<text x="{width - right + 28}" y="{top + i * 18 + 10}" font-size="11" fill="{AXIS}">{esc(name)}</text>')
    return _svg(width, height, body, title)


def hex_map(cells: Sequence[dict], *, title: str, width: int = 760, height: int = 520) -> str:
    """H3 cells as polygons: cells are {cell, rings (GeoJSON Polygon coordinates: [[ [lng, lat], ...]]),
    value (p99 ms), label (tooltip text), name (short text drawn inside)}; fill from green (lowest
    p99) to red (highest), on a log scale. Equirectangular projection around the cells' center."""
    cells = [c for c in cells if c.get("rings")]
    if not cells:
        return empty_chart(title, width, "no hexagon in this week has a location (no session records matched)")
    lngs = [p[0] for c in cells for ring in c["rings"] for p in ring]
    lats = [p[1] for c in cells for ring in c["rings"] for p in ring]
    lat0 = (min(lats) + max(lats)) / 2
    k = math.cos(math.radians(lat0))
    px = [lng * k for lng in lngs]
    top, bottom, side = 30, 60, 20
    span_x = (max(px) - min(px)) or 1e-6
    span_y = (max(lats) - min(lats)) or 1e-6
    scale = min((width - 2 * side) / span_x, (height - top - bottom) / span_y)
    ox = side + ((width - 2 * side) - span_x * scale) / 2
    oy = top + ((height - top - bottom) - span_y * scale) / 2
    X = lambda lng: ox + (lng * k - min(px)) * scale
    Y = lambda lat: oy + (max(lats) - lat) * scale
    values = [c["value"] for c in cells if c.get("value")]
    lo, hi = (min(values), max(values)) if values else (1, 1)
    t = lambda v: 0.5 if not v or hi <= lo else (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f4f7f9"/>',
            f'<text x="{side}" y="18" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>']
    for c in cells:
        fill = heat(t(c.get("value"))) if c.get("value") else "#cccccc"
        for ring in c["rings"][:1]:
            pts = " ".join(f"{X(lng):.1f},{Y(lat):.1f}" for lng, lat in ring)
            body.append(f'<polygon points="{pts}" fill="{fill}" fill-opacity="0.85" stroke="#333" stroke-width="1">'
                        f"<title>{esc(c.get('label', c['cell']))}</title></polygon>")
        ring = c["rings"][0]
        cx = sum(X(p[0]) for p in ring[:-1]) / max(1, len(ring) - 1)
        cy = sum(Y(p[1]) for p in ring[:-1]) / max(1, len(ring) - 1)
        if c.get("name"):
            body.append(f'<text x="{cx:.1f}" y="{cy + 4:.1f}" font-size="11" font-weight="600" text-anchor="middle" fill="#111">{esc(c["name"])}</text>')
    # scale bar (km) and color legend
    km_per_px = 111.32 / scale
    target = km_per_px * width / 5
    bar_km = max((m * 10 ** e for e in range(-3, 5) for m in (1, 2, 5) if m * 10 ** e <= target), default=target)
    bar_px = bar_km / km_per_px
    y = height - 22
    body.append(f'<line x1="{side}" y1="{y}" x2="{side + bar_px:.1f}" y2="{y}" stroke="#000" stroke-width="3"/>'
                f'<text x="{side + bar_px / 2:.1f}" y="{y - 6}" font-size="11" text-anchor="middle" fill="{AXIS}">{bar_km:g} km</text>')
    gx, gw = width - 260, 200
    body.append('<defs><linearGradient id="p99heat" x1="0" x2="1" y1="0" y2="0">'
                + "".join(f'<stop offset="{s}" stop-color="{heat(s)}"/>' for s in (0, 0.25, 0.5, 0.75, 1)) + "</linearGradient></defs>")
    body.append(f'<rect x="{gx}" y="{y - 10}" width="{gw}" height="10" fill="url(#p99heat)" stroke="#666"/>'
                f'<text x="{gx}" y="{y + 12}" font-size="11" fill="{AXIS}">{esc(fmt_ms(lo))}</text>'
                f'<text x="{gx + gw}" y="{y + 12}" font-size="11" text-anchor="end" fill="{AXIS}">{esc(fmt_ms(hi))}</text>'
                f'<text x="{gx + gw / 2}" y="{y - 14}" font-size="11" text-anchor="middle" fill="{AXIS}">p99 query latency</text>')
    return _svg(width, height, body, title)


def empty_chart(title: str, width: int = 760, why: str = "no data for this week") -> str:
    body = [f'<text x="10" y="16" font-size="13" font-weight="600" fill="{AXIS}">{esc(title)}</text>',
            f'<text x="10" y="44" font-size="12" fill="{GREY}">{esc(why)}</text>']
    return _svg(width, 60, body, title)
