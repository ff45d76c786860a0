"""`tailscope report`: the weekly report of the demo (the samples with the enrichment fixture, plus a
synthetic previous week) has every section, in HTML and Markdown, with the numbers of the marts;
the HTML is self-contained; and headless Chromium (Debian's chromium, installed by
scripts/install-report-deps.sh) renders it to a screenshot that is not blank."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("h3")

# one worker builds this module's dataset once (pytest -n with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("report")

from support import demo as demo_data
from support.demo import PREV, WEEK
from support.png import Image, read_png
from support import corpus
from support.duck import rows
from tailscope.cli import main as cli_main
from tailscope.jobs.analytics.report import SECTIONS
from tailscope.jobs.analytics.stats import fmt_duration, fmt_share

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
PALETTE_BLUE = (0x33, 0x66, 0xCC)  # the report's first series color (jobs/analytics/report_svg.py)
NAVY = (0x1D, 0x2D, 0x50)          # the report's title band and heading rules (jobs/analytics/report.py CSS)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    corpus.require_samples()
    ds = demo_data.analyze_demo(tmp_path_factory.mktemp("report-ds") / "ds")
    demo_data.add_previous_week(ds)
    return ds


@pytest.fixture(scope="module")
def report(dataset, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("report-out")
    rc = cli_main(["report", str(dataset), "--out", str(out), "--top", "10"])  # the latest week: WEEK
    assert rc == 0
    return {"dir": out, "html": out / f"report-{WEEK}.html", "md": out / f"report-{WEEK}.md",
            "geojson": out / f"hexagons-{WEEK}.geojson"}


@pytest.fixture(scope="module")
def con(dataset):
    from tailscope.jobs.analytics.db import build

    c = duckdb.connect(str(build(dataset)), read_only=True)
    yield c
    c.close()


def section(html_text: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html_text, re.DOTALL)
    assert m, f"section {sid} missing"
    return m.group(1)


# ----------------------------------------------------------------------------------------------


def test_files_written(report):
    """Without --week the report is of the latest week with flows."""
    for key in ("html", "md", "geojson"):
        assert report[key].is_file() and report[key].stat().st_size > 500, key
    assert not list(report["dir"].glob(".*.tmp")), "temporary files left behind"


def test_every_section_in_html_and_markdown(report):
    html_text, md = report["html"].read_text(), report["md"].read_text()
    for sid, title in SECTIONS:
        assert re.search(rf'<section id="{sid}"><h2>{re.escape(title)}</h2>', html_text), f"HTML: no heading {title!r}"
        assert f'<a href="#{sid}">' in html_text, f"HTML: {title!r} not in the navigation"
        assert f"\n## {title}\n" in md, f"Markdown: no heading {title!r}"
    headings = re.findall(r"<h2>(.*?)</h2>", html_text)
    assert headings == [t for _, t in SECTIONS], "sections out of order"


def test_self_contained(report):
    text = report["html"].read_text()
    assert not re.search(r"<(script|link|iframe|object|embed|img)\b", text, re.IGNORECASE)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", text, re.IGNORECASE)
    assert not re.search(r"@import|url\((?!#)", text), "CSS loading something"
    assert "http://" not in text and "https://" not in text
    assert text.count("<svg") >= 6, "the plots and the map are inline SVG"


def test_numbers_are_the_marts(report, con):
    html_text, md = report["html"].read_text(), report["md"].read_text()
    # p99 by carrier, with last week's and the delta
    carriers = rows(con, "SELECT * FROM week_over_week('carrier', ?) WHERE queries IS NOT NULL", [WEEK])
    sec = section(html_text, "carriers")
    for c in carriers:
        cells = re.search(rf"<tr><td>{re.escape(c['carrier'])}</td>(.*?)</tr>", sec).group(1)
        assert f">{c['queries']}<" in cells and f">{fmt_duration(c['p99_ms'])}<" in cells
        if c["p99_ms_prev"] is not None:
            assert f">{fmt_duration(c['p99_ms_prev'])}<" in cells
        top = rows(con, "SELECT label, share FROM mart_carrier_budget WHERE week = ? AND carrier = ? AND level = 'p99' "
                        "AND part_ms > 0 ORDER BY share DESC, ord LIMIT 1", [WEEK, c["carrier"]])
        assert top and f"{top[0]['label']} {fmt_share(top[0]['share'])}" in cells, "the part that took most of the tail's time is named"
    # the worst hexagon of the week, all carriers' cells on the map
    worst = rows(con, "SELECT carrier, h3_cell, p99_ms FROM worst_hexagons(?, ?, 1, 1)", [carriers[0]["carrier"], WEEK])
    hexes = section(html_text, "hexagons")
    first_row = re.search(r"<tbody><tr>(.*?)</tr>", hexes).group(1)
    top_hex = rows(con, "SELECT carrier, h3_cell, p99_ms FROM mart_carrier_hexagon WHERE week = ? AND h3_cell <> 'unknown' "
                        "ORDER BY p99_ms DESC, queries DESC, carrier, h3_cell LIMIT 1", [WEEK])[0]
    assert top_hex["h3_cell"] in first_row and fmt_duration(top_hex["p99_ms"]) in first_row
    assert worst[0]["h3_cell"] in hexes
    cells = rows(con, "SELECT h3_cell FROM mart_hexagon WHERE week = ? AND h3_cell <> 'unknown'", [WEEK])
    the_map = section(html_text, "map")
    assert the_map.count("<polygon") == len(cells) >= 3
    for c in cells:
        assert c["h3_cell"] in the_map
    # the worst flows, by id
    flows = rows(con, "SELECT CAST(flow_id AS VARCHAR) AS flow_id FROM worst_flows(?, 10)", [WEEK])
    sec = section(html_text, "worst-flows")
    assert [f["flow_id"] for f in flows] == re.findall(r"<tr><td class=\"num\">\d+</td><td>(-?\d+)</td>", sec)
    for f in flows:
        assert f"`{f['flow_id']}`" in md
    # field-study tables: this week and last week side by side
    fs = section(html_text, "field-study")
    assert f"<th>{WEEK}</th>" in fs and f"<th>{PREV}</th>" in fs and "RTT p50 / p75 / p95 / p99" in fs


def test_quic_vs_tcp_note_states_the_marts_settings(report, con):
    """The note under QUIC vs TCP words the bootstrap's resamples, the small-sample line and the
    session gap as sql/marts/070_quic_vs_tcp.sql sets them (one place each), not copies of them."""
    resamples, below, gap_ns = con.execute(
        "SELECT quic_vs_tcp_resamples(), quic_vs_tcp_min_queries(), session_gap_ns()").fetchone()
    md = report["md"].read_text()
    assert f"resampled with replacement {resamples:,} times" in md
    assert f"fewer than {below} queries on either side" in md
    assert f"{gap_ns // 10**9} s apart at most" in md


def test_week_over_week_section(report, con):
    sec = section(report["html"].read_text(), "week-over-week")
    moved = rows(con, "SELECT carrier, h3_cell, p99_ms_delta FROM week_over_week('carrier_hexagon', ?) "
                      "WHERE h3_cell <> 'unknown' AND p99_ms_delta IS NOT NULL", [WEEK])
    assert moved, "the synthetic previous week gives deltas"
    for m in moved:
        assert m["h3_cell"] in sec
    assert "+" in sec and "No flows in" not in sec
    # a carrier missing last week shows without a previous value
    assert re.search(rf"<td>{demo_data.DROPPED}</td><td class=\"num\">\d+</td><td class=\"num\">-</td>", sec)


def test_what_changed_section(report, con):
    """The summary leads with what changed (or says nothing moved beyond noise), and the What
    changed section lists every carrier's p50/p95/p99 change with its interval from
    what_changed_slices, the what-if table from the carrier budget mart."""
    html_text, md = report["html"].read_text(), report["md"].read_text()
    summary = section(html_text, "summary")
    first = re.search(r'<ul class="headlines"><li>(.*?)</li>', summary).group(1)
    assert "beyond noise" in first or re.search(r"p9[59] [+-]", first), first
    sec = section(html_text, "what-changed")
    from tailscope.jobs.analytics.stats import fmt_change

    for r in rows(con, "SELECT * FROM what_changed_slices(?) WHERE slice = 'carrier'", [WEEK]):
        assert html.escape(fmt_change(r)) in sec, (r["carrier"], r["level"], fmt_change(r))
    saves = rows(con, "SELECT carrier, label, without_ms FROM mart_carrier_budget WHERE week = ? AND level = 'p99' AND saved_ms > 0 "
                      "ORDER BY saved_ms DESC LIMIT 1", [WEEK])
    assert saves and html.escape(saves[0]["label"]) in sec and fmt_duration(saves[0]["without_ms"]) in sec
    assert "What if: each carrier" in sec and "## What changed" in md
    # the carrier missing last week: its Δ p99 reads 'new', not '-'
    assert re.search(rf"<tr><td>{demo_data.DROPPED}</td>.*?<td class=\"num\">new</td>", section(html_text, "carriers"))


def test_geojson(report, con):
    doc = json.loads(report["geojson"].read_text())
    cells = {r["h3_cell"]: r for r in rows(con, "SELECT h3_cell, p99_ms, queries FROM mart_hexagon WHERE week = ? AND h3_cell <> 'unknown'", [WEEK])}
    assert doc["type"] == "FeatureCollection" and {f["id"] for f in doc["features"]} == set(cells)
    for f in doc["features"]:
        assert f["geometry"]["type"] == "Polygon" and len(f["geometry"]["coordinates"][0]) == 7
        assert f["properties"]["p99_ms"] == pytest.approx(cells[f["id"]]["p99_ms"])


def test_weeks_without_data_and_bad_weeks(dataset, tmp_path, capsys):
    assert cli_main(["report", str(dataset), "--week", "2026-47", "--out", str(tmp_path)]) == 2
    assert "YYYY-Www" in capsys.readouterr().err
    # a week without data: nothing to report (exit 3), the weeks that have flows named, no file
    # written (an empty report would read as a quiet week)
    empty = tmp_path / "empty"
    assert cli_main(["report", str(dataset), "--week", "2020-W10", "--out", str(empty)]) == 3
    err = capsys.readouterr().err
    assert f"no flows in 2020-W10; weeks with flows: {PREV}, {WEEK}" in err, err
    assert not empty.exists() or not any(empty.iterdir())


# ----------------------------------------------------------------------------------------------
# the screenshot


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed: run scripts/install-report-deps.sh (make system-deps)")


def screenshot(page: Path, png: Path, profile: Path, size: str = "1280,6500") -> Image:
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={size}",
           page.resolve().as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0 and png.is_file(), f"chromium failed ({r.returncode}): {r.stderr[-2000:]}"
    return read_png(png.read_bytes())


def blankness(img: Image) -> dict:
    """Over every 2nd pixel of every 2nd row: the variance of the channel values, the share of
    pixels off the most common color, and how many pixels have the report's first series color
    (plots drawn)."""
    from collections import Counter

    ch, step = img.channels, 2
    colors: Counter = Counter()
    total = total_sq = n = 0
    squares = [v * v for v in range(256)]
    for y in range(0, img.height, step):
        row = img.rows[y]
        planes = [row[c :: ch * step] for c in range(min(3, ch))]
        colors.update(zip(*planes))
        for plane in planes:
            total += sum(plane)
            total_sq += sum(map(squares.__getitem__, plane))
            n += len(plane)
    mean = total / n
    pixels = sum(colors.values())
    blue = sum(k for px, k in colors.items() if len(px) == 3 and all(abs(a - b) <= 12 for a, b in zip(px, PALETTE_BLUE)))
    return {"variance": total_sq / n - mean * mean, "off_background": 1 - colors.most_common(1)[0][1] / pixels, "blue": blue}


def heading_rules(img: Image, color: tuple[int, int, int] = NAVY) -> int:
    """How many section headings the screenshot shows: each <h2> is underlined by a thin rule of
    the report's navy across the page (the title band, also navy, is much taller)."""
    pattern, rules, run = bytes(color), 0, 0
    for y in range(img.height + 1):
        full = y < img.height and img.rows[y].count(pattern) >= img.width // 2
        if full:
            run += 1
        elif run:
            rules += run <= 6
            run = 0
    return rules


def test_blankness_measure_and_png_reader():
    """The measure says blank for a blank page, and the PNG reader undoes every filter type."""
    import struct
    import zlib

    blank = Image(40, 30, 3, [bytes([255] * 120)] * 30)
    b = blankness(blank)
    assert b["variance"] == 0 and b["off_background"] == 0 and b["blue"] == 0
    assert heading_rules(blank) == 0
    ruled = Image(40, 30, 3, [bytes(NAVY) * 40 if y in (5, 6, 20) else bytes([255] * 120) for y in range(30)])
    assert heading_rules(ruled) == 2
    # an image with every filter type, encoded here, read back
    width, height, ch = 9, 10, 3
    pixels = [bytes((x * 37 + y * 11 + c * 101) % 256 for x in range(width) for c in range(ch)) for y in range(height)]

    def paeth(a, b, c):
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c

    raw, prev = b"", bytes(width * ch)
    for y, row in enumerate(pixels):
        kind = y % 5
        out = bytearray()
        for i, v in enumerate(row):
            a = row[i - ch] if i >= ch else 0
            c = prev[i - ch] if i >= ch else 0
            pred = [0, a, prev[i], (a + prev[i]) // 2, paeth(a, prev[i], c)][kind]
            out.append((v - pred) % 256)
        raw += bytes([kind]) + bytes(out)
        prev = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    assert read_png(png).rows == pixels


def test_screenshot_in_headless_chromium(report, tmp_path):
    img = screenshot(report["html"], tmp_path / "report.png", tmp_path / "profile")
    assert (img.width, img.height) == (1280, 6500)
    m = blankness(img)
    assert m["variance"] > 500, f"screenshot looks blank: {m}"
    assert m["off_background"] > 0.03, f"screenshot is almost one color: {m}"
    assert m["blue"] > 500, f"no plot drawn in the screenshot: {m}"
    # the title band on top, and every section's heading within the 6500 pixels (the page with its What changed and QUIC vs TCP sections)
    assert img.pixel(10, 10)[:3] == NAVY
    assert heading_rules(img) == len(SECTIONS), "not every section's heading is in the screenshot"


def test_charts_and_map_render_without_console_errors(report, tmp_path):
    """Chromium's DOM after loading the page: every chart and the map is a non-empty SVG, and the
    browser logged no console error (issue 17)."""
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
           "--dump-dom", report["html"].resolve().as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    svgs = re.findall(r"<svg\b.*?</svg>", r.stdout, re.S)
    assert len(svgs) >= 5, f"{len(svgs)} charts in the rendered page"
    drawn = [s for s in svgs if len(re.findall(r"<(?:rect|path|polyline|polygon|circle|line)\b", s)) >= 3]
    assert len(drawn) == len(svgs), "an SVG chart rendered empty"
    assert any("<polygon" in s or "<path" in s for s in svgs), "no hexagon map drawn"
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line and ("ERROR" in line or "Uncaught" in line)]
    assert not console, console[:5]


@pytest.mark.parametrize("total", [0.6, 1.0, 3.3, 7.2])
def test_share_axis_labels_do_not_run_together(total):
    """Overlapping charges can sum to several times the tail's latency: the axis labels stay
    apart and the 100 % line is always drawn (issue 17)."""
    from tailscope.jobs.analytics import report_svg

    svg_text = report_svg.stacked_share_bars([{"label": "a", "parts": [("x", total * 0.7), ("y", total * 0.3)]}], title="t")
    xs = sorted(float(m) for m in re.findall(r'<text x="([0-9.]+)"[^>]*text-anchor="middle"[^>]*>[0-9]+ %</text>', svg_text))
    assert len(xs) >= 2 and all(b - a >= 40 for a, b in zip(xs, xs[1:])), xs
    assert ">100 %</text>" in svg_text
