"""The HTML run summary (torch_otel/_html.py), opened in a real headless Chromium with no network.

Each page is loaded from a file with ``--dump-dom`` after its scripts ran, and the page's own
record is read back from ``<body>``: ``data-rendered`` (boxes the chart drew) and ``data-errors``
(everything ``window.onerror`` caught). Chromium's console goes to stderr, which must hold no
``Uncaught``. A screenshot is decoded with the standard library alone and must show the chart's
colours. Needs Debian's ``chromium`` package (or ``CHROMIUM=/path/to/chrome``); skipped without it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli
from torch_otel._sinks.html import render_html

SAMPLE = Path(__file__).parent / "data" / "summary-sample.json"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM or not os.path.exists(CHROMIUM),
    reason="no chromium (apt-get install chromium, or set CHROMIUM=/path/to/chromium)",
)

WIDTH, HEIGHT = 1400, 1000
# The chart's fills by kind (torch_otel/_assets/summary.css): each must show in the screenshot.
FILLS = {"frame": "7fb3e6", "compile": "8fd19e", "failed compile": "e5534b", "run": "a8b3bf"}
XSS = "<script>alert(1)</script></script><img src=x onerror=alert(2)>"


@dataclass
class Page:
    dom: str
    body: dict[str, str]
    stderr: str


def _chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp_path)
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # the tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={WIDTH},{HEIGHT}",
        "--virtual-time-budget=5000",
        *args,
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # the browser
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _open(tmp_path: Path, text: str, name: str = "summary.html") -> Page:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    done = _chromium(tmp_path, path, "--dump-dom")
    tag = re.search(r"<body\b([^>]*)>", done.stdout)
    assert tag, done.stdout[:2000]
    body = {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag.group(1))}
    return Page(done.stdout, body, done.stderr)


def _assert_clean(page: Page) -> None:
    assert page.body.get("data-errors") == "", page.body.get("data-errors")
    bad = [line for line in page.stderr.splitlines() if "Uncaught" in line or "Refused to" in line]
    assert not bad, bad


def _rendered(page: Page) -> int:
    value = page.body.get("data-rendered", "")
    assert value.isdigit(), f"the page's script did not finish: data-rendered={value!r}"
    return int(value)


def _png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered rows of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, ihdr, idat = 8, b"", []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + chunk) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            ihdr = chunk
        elif kind == b"IDAT":
            idat.append(chunk)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    return width, height, _unfilter(zlib.decompress(b"".join(idat)), width, height, bpp)


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> list[bytes]:
    stride = width * bpp
    # "Up" rows are added to the row above in one big-int operation: bytewise sum mod 256, no carries across bytes.
    low, high = int.from_bytes(b"\x7f" * stride, "big"), int.from_bytes(b"\x80" * stride, "big")
    prev, rows = bytearray(stride), []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = bytearray((((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(stride, "big"))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a, c = (line[i - bpp], prev[i - bpp]) if i >= bpp else (0, 0)
                b = prev[i]
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        else:
            assert kind == 0, f"PNG filter type {kind}"
        rows.append(bytes(line))
        prev = line
    return rows


def _sample() -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(SAMPLE.read_text())
    return summary


def _empty() -> dict[str, Any]:
    return {
        "source": "live",
        "compiles": 0,
        "by_kind": {},
        "wall_s": 0.0,
        "cpu_s": None,
        "phases": [],
        "frames": [],
        "slowest": [],
        "recompiles": {"total": 0, "by_category": {}, "top_reasons": []},
        "graph_breaks": {"total": 0, "by_code": []},
        "cache": [],
        "failures": {"total": 0, "by_type": {}},
        "recompile_limit_hits": 0,
        "eager_fallbacks": 0,
        "runtime": {"records": 0, "total_s": 0.0},
        "tree": {"name": "run", "kind": "run", "total_s": 0.0, "self_s": 0.0, "count": 1, "children": []},
    }


def _tree_size(node: dict[str, Any]) -> int:
    return 1 + sum(_tree_size(c) for c in node.get("children", []))


def test_sample_renders_chart_and_tables(tmp_path: Path) -> None:
    text = render_html(_sample())
    assert not re.search(r"https?:|\ssrc=|\shref=|@import|url\(", text), "the page must reference nothing outside itself"
    page = _open(tmp_path, text)
    _assert_clean(page)
    assert 10 < _rendered(page) <= _tree_size(_sample()["tree"])
    assert 'class="box k-compile err' in page.dom  # the failed compile is marked
    for shown in ("triton_compile", "RecompileLimitExceeded", "GB0001", "tensor 'x' size mismatch", "fx_graph"):
        assert shown in page.dom, shown


def test_sample_screenshot_shows_the_chart(tmp_path: Path) -> None:
    path = tmp_path / "summary.html"
    path.write_text(render_html(_sample()), encoding="utf-8")
    shot = tmp_path / "summary.png"
    _chromium(tmp_path, path, f"--screenshot={shot}")
    width, height, rows = _png_rows(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    bpp = len(rows[0]) // width
    colours = {row[i : i + 3] for row in rows for i in range(0, len(row), bpp)}
    assert len(colours) >= 5, f"a blank page: {len(colours)} colours"
    missing = [kind for kind, hexa in FILLS.items() if bytes.fromhex(hexa) not in colours]
    assert not missing, f"no box of {missing} in the screenshot"


# Appended to the page: hovers every box, zooms into a compile, zooms back out; the results land in data-probe.
PROBE = """<script>
(function () {
  var out = {parallel: 0, tip: ""};
  var boxes = Array.prototype.slice.call(document.querySelectorAll("#chart .box"));
  var tip = document.getElementById("tip");
  boxes.forEach(function (b) {
    var r = b.getBoundingClientRect();
    b.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: r.left + 1, clientY: r.top + 1}));
    if (tip.textContent.indexOf("children ran in parallel") >= 0) { out.parallel += 1; out.tip = tip.textContent; }
  });
  out.before = document.body.dataset.rendered;
  var compile = boxes.filter(function (b) { return b.textContent.indexOf("frame 0/0") === 0; })[0];
  compile.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  out.crumbs = document.getElementById("crumbs").textContent;
  var zoomed = Array.prototype.filter.call(document.querySelectorAll("#chart .box"), function (b) {
    return b.textContent.indexOf("frame 0/0") === 0;
  })[0];
  out.zoomedWidth = parseFloat(zoomed.style.width);
  out.chartWidth = document.getElementById("chart").clientWidth;
  out.zoomed = document.body.dataset.rendered;
  document.getElementById("reset").click();
  out.after = document.body.dataset.rendered;
  document.body.dataset.probe = JSON.stringify(out);
})();
</script>
</body>"""


def test_hover_and_zoom(tmp_path: Path) -> None:
    page = _open(tmp_path, render_html(_sample()).replace("</body>", PROBE))
    _assert_clean(page)
    probe = json.loads(page.body["data-probe"])
    # frame 0/0's async_compile.wait ran its kernel builds in parallel (sample data): 2.6 s of work in 1.1 s
    assert probe["parallel"] >= 1 and "of work in" in probe["tip"], probe
    assert "frame 0/0" in probe["crumbs"]
    assert probe["zoomedWidth"] >= probe["chartWidth"] - 2, probe
    assert probe["after"] == probe["before"] != probe["zoomed"], probe


def test_harness_sees_script_errors(tmp_path: Path) -> None:
    """The two error channels the other tests rely on do report an uncaught error."""
    page = _open(tmp_path, render_html(_sample()).replace("</body>", "<script>throw new Error('canary')</script></body>"))
    assert "canary" in page.body["data-errors"]
    assert any("Uncaught" in line and "canary" in line for line in page.stderr.splitlines()), page.stderr[-3000:]


def test_names_from_user_code_are_text_not_markup(tmp_path: Path) -> None:
    summary = _sample()
    summary["source"] = XSS
    frame = summary["tree"]["children"][0]
    frame["name"] = XSS
    frame["children"][0]["detail"] = XSS
    frame["children"][0]["children"][0]["name"] = XSS
    summary["phases"][0]["name"] = XSS
    summary["frames"][0].update(function=XSS, file="/tmp/</script>/x.py")
    summary["slowest"][0]["id"] = XSS
    summary["recompiles"]["top_reasons"][0]["reason"] = XSS
    summary["recompiles"]["by_category"] = {XSS: 1}
    summary["graph_breaks"]["by_code"][0]["type"] = XSS
    summary["failures"]["by_type"] = {XSS: 1}
    summary["cache"][0]["cache"] = XSS
    text = render_html(summary)
    # Any alert the page runs is recorded instead of blocking headless Chromium.
    text = text.replace(
        "<head>", "<head><script>window.alert = function (m) { document.documentElement.dataset.alerted = m; };</script>", 1
    )
    page = _open(tmp_path, text)
    _assert_clean(page)
    assert _rendered(page) > 10
    assert "data-alerted" not in page.dom
    assert page.dom.count("<script") == 4  # the alert hook, the error catcher, the JSON, the page's script
    assert "<img" not in page.dom
    assert page.dom.count("&lt;script&gt;alert(1)&lt;/script&gt;&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;") >= 10


@pytest.mark.parametrize("summary", [_empty(), {}], ids=["no-compiles", "no-fields"])
def test_empty_run_says_no_compiles(tmp_path: Path, summary: dict[str, Any]) -> None:
    page = _open(tmp_path, render_html(summary))
    _assert_clean(page)
    assert _rendered(page) == 0
    assert "no compiles in this run" in page.dom
    assert 'id="chart"' not in page.dom


def test_five_thousand_nodes_render(tmp_path: Path) -> None:
    def phases(depth: int, total: float) -> list[dict[str, Any]]:
        if depth == 6:
            return []
        return [
            {"name": f"phase {depth}.{i}", "kind": "phase", "total_s": total * 0.45, "self_s": 0.0, "count": 1}
            | {"children": phases(depth + 1, total * 0.45)}
            for i in range(2)
        ]

    compiles = [
        {"name": f"frame {f}/{c}", "kind": "compile", "total_s": 1.0, "self_s": 0.1, "count": 1, "status": "ok"}
        | {"children": phases(0, 1.0)}
        for f in range(10)
        for c in range(8)
    ]
    frames = [
        {
            "name": f"fn{f} (m.py:{f})",
            "kind": "frame",
            "total_s": 8.0,
            "self_s": 0.0,
            "count": 8,
            "children": compiles[f * 8 : f * 8 + 8],
        }
        for f in range(10)
    ]
    summary = _sample() | {"tree": {"name": "run", "kind": "run", "total_s": 80.0, "self_s": 0.0, "count": 1, "children": frames}}
    assert _tree_size(summary["tree"]) > 5000
    page = _open(tmp_path, render_html(summary))
    _assert_clean(page)
    assert _rendered(page) > 1000


def test_a_replayed_gpu_logs_page_renders_its_chart(tmp_path: Path) -> None:
    """``torch-otel replay LOG --html``: tlparse's real CUDA log (Triton builds, autotuning, cudagraphs) as a page."""
    log = Path(__file__).parent / "data" / "tlparse-corpus" / "inductor_provenance_jit_cuda_log.txt.gz"
    res = run_cli("replay", str(log), "-o", str(tmp_path / "s.jsonl"), "--html", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    assert f"compile time report written to {tmp_path / 'r.html'}" in res.stderr
    page = _open(tmp_path, (tmp_path / "r.html").read_text())
    _assert_clean(page)
    assert _rendered(page) > 10
    for shown in ("forward (aot.py:28)", "async_compile.precompile", "frame 0/0"):
        assert shown in page.dom, shown


NOWRAP_PROBE = """<script>
(function () {
  function lines(td) { var r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length; }
  var slowest = Array.prototype.filter.call(document.querySelectorAll("#tables > section"), function (s) {
    return s.querySelector("h2").textContent === "Slowest compiles";
  })[0];
  var cell = slowest.querySelector("td.nw"), other = cell.parentElement.querySelector("td:not(.nw):not(.n)");
  document.body.dataset.nowrap = JSON.stringify({id: cell.textContent, idLines: lines(cell), frameLines: lines(other)});
})();
</script></body>"""


def test_cold_and_warm_starts_and_ids_that_never_wrap(tmp_path: Path) -> None:
    """The page shows the caches' cold and warm facts and the ranks that missed alone; a compile id stays on one line
    however long the frame beside it (at a narrow window, 0/0 used to wrap at its slash)."""
    summary = _sample()
    summary["slowest"][0]["function"] = "a_function_with_a_very_long_name_" * 6
    summary["caches"] = {
        "miss_cost_s": 12.5,
        "load_s": 1.25,
        "saved_s": 20.25,
        "hit_rate": {"fx_graph": {"hits": 2, "misses": 2, "rate": 0.5}},
        "misses": 2,
        "misses_by_cause": {"config": 2},
        "top_reasons": [
            {"cache": "fx_graph", "reason": "inductor config max_fusion_size: 64 → 63, against 0/0 on rank 0", "count": 2}
        ],
        "odd_ranks": [
            {
                "rank": 1,
                "cache": "fx_graph",
                "graph": "0/0 forward",
                "hit_on": [0],
                "reason": "inductor config max_fusion_size: 64 → 63",
            }
        ],
    }
    page = _open(tmp_path, render_html(summary).replace("</body>", NOWRAP_PROBE))
    _assert_clean(page)
    for shown in (
        "Cold and warm starts",
        "12.500 s",
        "20.250 s",
        "50.0%",
        "Ranks that missed what the others hit",
        "max_fusion_size: 64",
    ):
        assert shown in html.unescape(page.dom), shown
    probe = json.loads(page.body["data-nowrap"])
    assert probe["id"] == summary["slowest"][0]["id"] and probe["frameLines"] > 1, probe
    assert probe["idLines"] == 1, probe  # one line, beside a frame name that wraps


BOXES_PROBE = """<script>
(function () {
  var boxes = Array.prototype.slice.call(document.querySelectorAll("#chart .box")), bad = [], labelled = 0;
  var rects = boxes.map(function (b) { return b.getBoundingClientRect(); });
  boxes.forEach(function (b, i) {
    var r = rects[i], want = parseFloat(b.style.width);
    if (r.height > 20.01 || Math.abs(r.width - Math.max(1, want)) > 0.6) bad.push(b.textContent + " drawn " + r.width + "x" + r.height + " for a width of " + want);
    if (b.textContent) labelled++;
    for (var j = 0; j < i; j++) {
      var o = rects[j], dx = Math.min(r.right, o.right) - Math.max(r.left, o.left), dy = Math.min(r.bottom, o.bottom) - Math.max(r.top, o.top);
      if (dx > 0.6 && dy > 0.6) bad.push("'" + boxes[j].textContent + "' covers " + dx.toFixed(1) + "x" + dy.toFixed(1) + " px of '" + b.textContent + "'");
    }
  });
  document.body.dataset.boxes = JSON.stringify({n: boxes.length, labelled: labelled, bad: bad.slice(0, 10)});
})();
</script></body>"""


def test_no_chart_box_covers_another_or_its_label(tmp_path: Path) -> None:
    """Each box of the chart is drawn exactly where its time puts it: none overlaps a neighbour in its row or the
    row below. (Padding outside the set width made each box 9 px wider and 4 px taller than its time, so a box
    drawn later hid the first letter of its right-hand neighbour's label: "frame 1/0" read "rame 1/0".)"""
    page = _open(tmp_path, render_html(_sample()).replace("</body>", BOXES_PROBE))
    _assert_clean(page)
    probe = json.loads(page.body["data-boxes"])
    assert probe["n"] > 10 and probe["labelled"] > 3, probe
    assert probe["bad"] == [], probe


LAYOUT_PROBE = """<script>
(function () {
  function text(e) { return e ? e.textContent : null; }
  var tiles = Array.prototype.map.call(document.querySelectorAll("#tiles .card"), function (c) {
    return {value: text(c.querySelector("b")), label: text(c.querySelector("span")), cache: c.classList.contains("cache")};
  });
  var more = document.getElementById("more-phases");
  var firstCache = document.querySelector("#tiles .card.cache");
  document.body.dataset.layout = JSON.stringify({
    title: document.title,
    tiles: tiles,
    cacheTileAboveChart: !!firstCache && firstCache.getBoundingClientRect().bottom <= document.getElementById("chart").getBoundingClientRect().top,
    shownPhases: Array.prototype.map.call(document.querySelectorAll("#phases tbody tr"), function (r) { return r.cells[0].textContent; }),
    phaseHeader: Array.prototype.map.call(document.querySelectorAll("#phases thead th"), text),
    more: more ? {summary: text(more.querySelector("summary")), open: more.open, rows: more.querySelectorAll("tbody tr").length} : null,
    over100: text(document.getElementById("phases-over-100")),
    sections: Array.prototype.map.call(document.querySelectorAll("#tables > section > h2"), text),
    recompiling: Array.prototype.map.call(document.querySelectorAll("#tables h3"), text)
  });
})();
</script></body>"""


def _layout(tmp_path: Path, summary: dict[str, Any]) -> dict[str, Any]:
    page = _open(tmp_path, render_html(summary).replace("</body>", LAYOUT_PROBE))
    _assert_clean(page)
    layout: dict[str, Any] = json.loads(page.body["data-layout"])
    return layout


def test_the_page_leads_with_cache_tiles_and_folds_the_phases_that_carry_no_time(tmp_path: Path) -> None:
    """Issue 43: an inductor run lists about 60 phases, most at 0.0 %, and its self times add up to more than the wall
    time (parallel kernel builds, each counted). The page shows the phases that carry time, folds the rest under one
    line, says what its percentages are of and why they pass 100 %, and has tiles for the caches at the top."""
    summary = _sample()
    wall = summary["wall_s"]
    # the sample's 16 phases (their self times sum to 120 % of the wall time), and 44 more that carry almost none
    summary["phases"] += [{"name": f"tiny_phase_{i}", "count": 1, "total_s": 0.0004, "self_s": 0.0004} for i in range(44)]
    summary["caches"] = {
        "miss_cost_s": 12.5,
        "load_s": 1.25,
        "saved_s": 20.25,
        "hit_rate": {"fx_graph": {"hits": 3, "misses": 1, "rate": 0.75}, "aot_autograd": {"hits": 0, "misses": 2, "rate": 0}},
        "misses": 3,
        "misses_by_cause": {"config": 3},
        "top_reasons": [{"cache": "fx_graph", "reason": "inductor config size_asserts: True → False", "count": 1}],
    }
    layout = _layout(tmp_path, summary)
    cache_tiles = [(t["value"], t["label"]) for t in layout["tiles"] if t["cache"]]
    assert cache_tiles == [
        ("0.0%", "aot_autograd cache hit rate (0 of 2 lookups)"),
        ("75.0%", "fx_graph cache hit rate (3 of 4 lookups)"),
        ("12.5 s", "cold work: compiles a warm cache would skip"),
        ("20.3 s", "saved by cache hits (torch's record)"),
    ], layout["tiles"]
    labels = [t["label"] for t in layout["tiles"]]
    assert labels.index("aot_autograd cache hit rate (0 of 2 lookups)") == 2  # right after the compiles and their time
    assert layout["cacheTileAboveChart"]
    shown = layout["shownPhases"]
    by_self = sorted(summary["phases"], key=lambda p: -p["self_s"])
    carrying = [p["name"] for p in by_self if p["self_s"] >= 0.01 * wall]
    assert shown == carrying[: len(shown)] and 3 <= len(shown) <= 12, shown
    assert not [n for n in shown if n.startswith("tiny_phase")]
    more = layout["more"]
    assert more is not None and not more["open"] and more["rows"] == 60 - len(shown), more
    assert more["summary"].startswith(f"{60 - len(shown)} more phases, each under 1% of the compile time: "), more
    assert layout["phaseHeader"][-1] == "self, % of compile time"
    self_pct = 100 * sum(p["self_s"] for p in summary["phases"]) / wall
    assert layout["over100"].startswith(f"These shares add up to {self_pct:.1f}% of the compile time, more than 100%"), layout
    sections = layout["sections"]
    assert sections.index("Cold and warm starts") == 2 and sections.index("Cache lookups") == len(sections) - 1, sections


def test_counts_of_one_read_in_the_singular(tmp_path: Path) -> None:
    summary = _sample() | {"compiles": 1, "recompile_limit_hits": 1, "eager_fallbacks": 1, "cache": []}
    summary["recompiles"] = {"total": 1, "by_category": {"size_mismatch": 1}, "top_reasons": []}
    summary["graph_breaks"] = {"total": 0, "by_code": []}
    summary["failures"] = {"total": 1, "by_type": {"Unsupported": 1}}
    summary["phases"] = [{"name": "bytecode_tracing", "count": 1, "total_s": 0.5, "self_s": 0.5}]
    summary["recompiling_frames"] = [
        {"function": "f", "file": "t.py", "line": 3, "recompiles": 1, "limit": 8, "cache_entries": 2, "left_before_limit": 6}
    ]
    layout = _layout(tmp_path, summary)
    labels = {t["label"]: t["value"] for t in layout["tiles"]}
    for label, value in (
        ("compile", "1"),
        ("recompile", "1"),
        ("graph breaks", "0"),
        ("failure", "1"),
        ("recompile-limit hit", "1"),
        ("frame left in eager", "1"),
        ("cache lookups (inductor's and AOTAutograd's caches were not asked)", "none"),
    ):
        assert labels.get(label) == value, (label, layout["tiles"])
    assert layout["title"] == f"torch.compile run summary ({summary['source']}, 1 compile)"
    assert layout["recompiling"] == ["f (t.py:3): 1 recompile, 2 of 8 compiles, 6 more before eager"], layout["recompiling"]
    assert layout["more"] is None and layout["over100"] is None  # one phase: nothing folded, nothing over 100 %


def test_a_real_inductor_logs_page_leads_with_its_caches_and_says_why_its_shares_pass_100(tmp_path: Path) -> None:
    """A real cold inductor run (tests/data/cache-baseline-2.13: C++ builds on a CPU, 57 phases, its self times 106 %
    of its compile time), replayed to JSON by the command as a user runs it, then rendered as the page."""
    log = Path(__file__).parent / "data" / "cache-baseline-2.13" / "rank_0.log.gz"
    res = run_cli("replay", str(log), "-o", str(tmp_path / "s.jsonl"), "--json", str(tmp_path / "s.json"))
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    wall, phases = summary["wall_s"], summary["phases"]
    self_pct = 100 * sum(p["self_s"] for p in phases) / wall
    assert len(phases) > 40 and self_pct > 100, (len(phases), self_pct)  # what the issue saw on inductor runs
    layout = _layout(tmp_path, summary)
    cache_tiles = [(t["value"], t["label"]) for t in layout["tiles"] if t["cache"]]
    assert cache_tiles[:2] == [
        ("0.0%", "aot_autograd cache hit rate (0 of 1 lookup)"),
        ("0.0%", "fx_graph cache hit rate (0 of 2 lookups)"),
    ], layout["tiles"]
    assert cache_tiles[2] == (f"{summary['caches']['miss_cost_s']:.1f} s", "cold work: compiles a warm cache would skip")
    assert layout["cacheTileAboveChart"]
    carrying = [p["name"] for p in sorted(phases, key=lambda p: -p["self_s"]) if p["self_s"] >= 0.01 * wall]
    assert layout["shownPhases"] == carrying and len(carrying) < 12, layout["shownPhases"]  # compile_file, codegen, ...
    assert layout["more"]["rows"] == len(phases) - len(carrying) and not layout["more"]["open"], layout["more"]
    assert layout["over100"].startswith(f"These shares add up to {self_pct:.1f}% of the compile time, more than 100%"), layout


def test_frames_left_in_eager_lead_and_a_library_frame_shows_the_users_call_site(tmp_path: Path) -> None:
    """Issue 42: the page names the frames torch left in eager first, and a frame inside an installed package with
    the user's line that called it, as the text summary does; a user's own frame is named by its own line."""
    s = _sample()
    lib = "/venv/lib/python3.11/site-packages/transformers/utils/generic.py"
    s["frames"] = [
        {"function": "wrapper", "file": lib, "line": 1030, "call_site": "train.py:42", "compiles": 2, "total_s": 1.5},
        {"function": "forward", "file": "/src/model.py", "line": 30, "call_site": "train.py:41", "compiles": 1, "total_s": 1.0},
    ]
    s["eager_frames"] = [
        {
            "function": "forward",
            "file": "/src/w.py",
            "line": 8,
            "call_site": None,
            "why": "graph_break_in_loop",
            "compiles": 1,
            "code": "GB0059",
            "type": "Failed to trace builtin operator",
            "explanation": "Dynamo does not know how to trace builtin operator `print`",
            "text": "a graph break inside a loop at w.py:13: torch skipped the whole frame (GB7000)",
        }
    ]
    page = _open(tmp_path, render_html(s))
    _assert_clean(page)
    assert "wrapper (generic.py:1030) from train.py:42" in page.dom
    assert "forward (model.py:30)" in page.dom and "from train.py:41" not in page.dom
    tables = page.dom[page.dom.index('id="tables"') :]
    assert "forward (w.py:8): </b>a graph break inside a loop at w.py:13: torch skipped the whole frame (GB7000)" in page.dom
    assert "the break: GB0059 Failed to trace builtin operator: Dynamo does not know" in page.dom
    first = re.search(r"<h2>([^<]*)</h2>", tables)
    assert first is not None and first.group(1) == "Frames left in eager"
    assert re.search(r"<b>1</b><span>frame left in eager</span>", page.dom)


def test_a_limit_hit_before_a_reset_does_not_say_the_frame_runs_in_eager(tmp_path: Path) -> None:
    """After ``torch._dynamo.reset()`` a frame that hit the recompile limit compiles again: the page says the hit came
    before a reset, as the text does (``limit_hits_before_reset``, tests/test_resets.py); a hit since says eager."""
    s = _sample()
    row = {"file": "/src/m.py", "line": 3, "call_site": None, "recompiles": 2, "limit": 2, "guards": [], "fixes": []}
    s["recompiling_frames"] = [
        {**row, "function": "h", "limit_hits": 1, "limit_hits_before_reset": 1, "cache_entries": 1, "left_before_limit": 1},
        {**row, "function": "k", "limit_hits": 1, "limit_hits_before_reset": 0, "cache_entries": 2, "left_before_limit": 0},
        {**row, "function": "old", "limit_hits": 1, "cache_entries": 2, "left_before_limit": 0},  # an older summary's row
    ]
    page = _open(tmp_path, render_html(s))
    _assert_clean(page)
    heads = {m.group(1): m.group(2) for m in re.finditer(r"<h3[^>]*>(\w+) \(m\.py:3\): ([^<]*)</h3>", page.dom)}
    assert heads["h"] == "2 recompiles, 1 of 2 compiles, 1 more before eager (hit before a reset)", heads
    assert heads["k"] == heads["old"] == "2 recompiles, hit the limit (2): runs in eager", heads
