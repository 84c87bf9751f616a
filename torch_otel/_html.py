"""The run summary as one self-contained HTML page: where did this run's compile time go.

:func:`render_html` takes :meth:`RunSummary.to_dict <torch_otel._summary.RunSummary.to_dict>`
and returns a page with no outside references at all (no CDN, fonts, images or scripts): inline
CSS and vanilla JS draw an icicle chart of the summary's tree (the run, its frames, their compiles,
their phases) and its tables. The page must open from a file on a machine with no network.

The summary is embedded as JSON in a ``<script type="application/json">`` element and the page is
built from it with ``textContent`` only, so names, reasons and file paths from user code or logs
can never become markup. Every ``<``, ``>`` and ``&`` in that JSON is written as a ``\\u00XX``
escape, which JSON.parse reads back unchanged and the HTML parser cannot end the element on.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["render_html"]

_PAGE_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>"""

_STYLE = """</title>
<style>
:root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --bg: #fff; --soft: #f6f8fa; --err: #d1242f; }
* { box-sizing: border-box; }
body { margin: 0; padding: 16px 24px 40px; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg); }
h1 { font-size: 20px; margin: 0 0 8px; }
h2 { font-size: 16px; margin: 0 0 8px; }
h3 { font-size: 14px; margin: 12px 0 6px; }
.muted { color: var(--muted); }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0 16px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; background: var(--soft); min-width: 110px; }
.card b { display: block; font-size: 18px; }
.card.bad b { color: var(--err); }
.card span { color: var(--muted); font-size: 12px; }
.toolbar { display: flex; align-items: center; gap: 12px; flex-wrap: wrap; margin: 4px 0 6px; }
.toolbar button { font: inherit; padding: 2px 10px; cursor: pointer; }
.crumbs { color: var(--muted); overflow-wrap: anywhere; }
.legend { display: flex; gap: 12px; flex-wrap: wrap; font-size: 12px; color: var(--muted); }
.legend i { display: inline-block; width: 12px; height: 12px; vertical-align: -2px; margin-right: 4px; border-radius: 2px; }
#chart { position: relative; width: 100%; overflow: hidden; border: 1px solid var(--line); border-radius: 4px;
  font-size: 12px; user-select: none; }
.box { position: absolute; height: 19px; overflow: hidden; white-space: nowrap; text-overflow: ellipsis;
  padding: 2px 4px; line-height: 15px; cursor: pointer; border-right: 1px solid #fff; border-bottom: 1px solid #fff;
  color: #1f2328; }
.box:hover { filter: brightness(0.9); }
.k-run { background: #a8b3bf; }
.k-frame { background: #7fb3e6; }
.k-compile { background: #8fd19e; }
.k-phase { background: #f2c57c; }
.k-more { background: #cfd3d7; color: #424a53; font-style: italic; }
.k-small { background: repeating-linear-gradient(45deg, #dfe3e7 0 3px, #eef0f2 3px 6px); cursor: zoom-in; }
.sw-err, .box.err { background: #e5534b; color: #fff; font-weight: 600; }
.box.anc { opacity: 0.55; }
.box.focus { box-shadow: inset 0 -2px 0 #1f2328; }
#tip { position: fixed; display: none; z-index: 10; max-width: 480px; padding: 6px 8px; background: #fff; pointer-events: none;
  border: 1px solid var(--line); border-radius: 4px; box-shadow: 0 2px 8px rgba(0, 0, 0, 0.15); font-size: 12px; }
#tip div { overflow-wrap: anywhere; }
#tip .t { font-weight: 600; font-size: 13px; }
#tip .note { color: #9a6700; }
#tip .bad { color: var(--err); font-weight: 600; }
.empty { padding: 24px; text-align: center; color: var(--muted); font-size: 16px; border: 1px dashed var(--line); border-radius: 4px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 24px; margin-top: 24px; }
section.tbl { min-width: 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td { overflow-wrap: anywhere; }
td.n, th.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.bar { min-width: 90px; background-repeat: no-repeat; background-image: linear-gradient(#fae3bf, #fae3bf);
  background-size: 0 100%; background-position: 0 0; }
tr.err td { color: var(--err); }
.none { color: var(--muted); font-style: italic; margin: 4px 0; }
.fail { color: var(--err); }
</style>
</head>
"""

# The error catcher runs first, so a failure anywhere later still lands in data-errors (the tests read it).
_BODY_START = """<body data-errors="" data-rendered="">
<script>
(function () {
  function note(msg) {
    var b = document.body, prev = b.dataset.errors;
    b.dataset.errors = (prev ? prev + "\\n" : "") + msg;
  }
  window.__noteError = note;
  window.addEventListener("error", function (e) {
    note(String(e.message || "error") + (e.lineno ? " (line " + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) { note("unhandled rejection: " + String(e.reason)); });
})();
</script>
<noscript><p>This page needs JavaScript to draw the run summary (it loads nothing from the network).</p></noscript>
<header id="head"></header>
<main>
<section>
<div class="toolbar">
<h2 style="margin:0">Where the compile time went</h2>
<button id="reset" type="button" disabled>reset zoom</button>
<span class="crumbs" id="crumbs"></span>
</div>
<div class="toolbar legend" id="legend"></div>
<div id="chart"></div>
<p class="muted" style="font-size:12px;margin:4px 0 0">Width is time. A box's children are laid out left to right
inside it; the gap that remains is its self time. Hover for details, click to zoom, click the top bar or press Esc to zoom out.</p>
</section>
<div class="grid" id="tables"></div>
</main>
<div id="tip"></div>
<script type="application/json" id="summary">"""

_SCRIPT = r"""</script>
<script>
(function () {
  "use strict";
  var ROW = 20, MIN_PX = 1, LABEL_PX = 28;
  var noteError = window.__noteError || function () {};

  // -- small helpers ---------------------------------------------------------
  function num(v) { v = Number(v); return isFinite(v) ? v : 0; }
  function arr(v) { return Array.isArray(v) ? v : []; }
  function obj(v) { return v && typeof v === "object" && !Array.isArray(v) ? v : {}; }
  function str(v) { return v === null || v === undefined ? "" : String(v); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmtS(s) {
    s = num(s);
    var a = Math.abs(s);
    if (a === 0) return "0 s";
    if (a < 1e-3) return (s * 1e6).toFixed(0) + " \u00b5s";
    if (a < 1) return (s * 1e3).toFixed(a < 0.01 ? 2 : a < 0.1 ? 1 : 0) + " ms";
    if (a < 100) return s.toFixed(a < 10 ? 2 : 1) + " s";
    return Math.round(s).toLocaleString("en-US") + " s";
  }
  function fix3(s) { return num(s).toFixed(3); }
  function pct(part, whole) { whole = num(whole); return whole > 0 ? (100 * num(part) / whole).toFixed(1) + "%" : "\u2013"; }
  function where(fn, file, line) {
    var f = str(fn) || "?";
    if (file === null || file === undefined || file === "") return f;
    var base = str(file).split(/[\\/]/).pop();
    return f + " (" + base + ":" + (line === null || line === undefined ? "?" : line) + ")";
  }
  function guard(name, fn) {
    try { fn(); } catch (e) {
      noteError(name + ": " + (e && e.stack ? e.stack : String(e)));
      var t = document.getElementById("tables");
      if (t) t.appendChild(el("p", "fail", "could not draw " + name + ": " + String(e)));
    }
  }

  var started = performance.now();
  var S = {};
  guard("the summary", function () { S = obj(JSON.parse(document.getElementById("summary").textContent)); });

  // -- header ----------------------------------------------------------------
  function card(box, value, label, bad) {
    var c = el("div", bad ? "card bad" : "card");
    c.appendChild(el("b", null, value));
    c.appendChild(el("span", null, label));
    box.appendChild(c);
  }
  function drawHeader() {
    var head = document.getElementById("head");
    var compiles = num(S.compiles);
    head.appendChild(el("h1", null, "torch.compile run summary"));
    var kinds = Object.keys(obj(S.by_kind)).map(function (k) { return num(S.by_kind[k]) + " " + k; }).join(", ");
    head.appendChild(el("div", "muted", "source: " + (str(S.source) || "unknown") + (kinds ? " \u00b7 " + kinds : "")));
    var cards = el("div", "cards");
    card(cards, String(compiles), "compiles");
    card(cards, fmtS(S.wall_s), "compile wall time");
    if (S.cpu_s !== null && S.cpu_s !== undefined) card(cards, fmtS(S.cpu_s), "CPU time while compiling");
    if (num(S.first_to_last_s) > 0) card(cards, fmtS(S.first_to_last_s), "first to last compile");
    card(cards, String(num(obj(S.recompiles).total)), "recompiles");
    card(cards, String(num(obj(S.graph_breaks).total)), "graph breaks");
    var failed = num(obj(S.failures).total);
    card(cards, String(failed), "failures", failed > 0);
    var limit = num(S.recompile_limit_hits);
    card(cards, String(limit), "recompile-limit hits", limit > 0);
    if (num(S.eager_fallbacks) > 0) card(cards, String(num(S.eager_fallbacks)), "frames left in eager", true);
    var rt = obj(S.runtime);
    if (num(rt.records) > 0) card(cards, fmtS(rt.total_s), num(rt.records) + " runtime records (not compile time)");
    head.appendChild(cards);
  }

  // -- the icicle chart --------------------------------------------------------
  var nodes = [];   // flattened tree, pre-order: {name, kind, total, self, count, detail, status, parent, depth, kids, kidSum}
  var zoom = 0, drawn = [], rows = 0;

  function flatten(root) {
    var stack = [[root, -1, 0]];
    while (stack.length) {
      var top = stack.pop(), raw = obj(top[0]), i = nodes.length;
      var nd = {
        name: str(raw.name) || "?", kind: str(raw.kind) || "phase", total: Math.max(0, num(raw.total_s)),
        self: num(raw.self_s), count: num(raw.count), detail: str(raw.detail), status: str(raw.status),
        parent: top[1], depth: top[2], kids: [], kidSum: 0
      };
      nodes.push(nd);
      if (nd.parent >= 0) nodes[nd.parent].kids.push(i);
      var kids = arr(raw.children);
      for (var k = kids.length - 1; k >= 0; k--) stack.push([kids[k], i, top[2] + 1]);
    }
    for (var j = nodes.length - 1; j > 0; j--) nodes[nodes[j].parent].kidSum += nodes[j].total;
  }

  function colourOf(nd) {
    if (nd.kind !== "phase") return null;
    var h = 0;
    for (var i = 0; i < nd.name.length; i++) h = (h * 31 + nd.name.charCodeAt(i)) | 0;
    h = Math.abs(h);
    return "hsl(" + (22 + (h % 36)) + ", 80%, " + (66 + ((h >> 6) % 12)) + "%)";
  }

  function layout(frag, width) {
    var path = [];
    for (var i = zoom; i >= 0; i = nodes[i].parent) path.unshift(i);
    // The zoomed node and its ancestors span the full width, one row each (a node's row is its depth).
    path.forEach(function (p, row) { addBox(frag, p, 0, width, row, p === zoom ? "focus" : "anc"); });
    var stack = [[zoom, 0, width]];
    while (stack.length) {
      var t = stack.pop(), nd = nodes[t[0]], x = t[1], w = t[2];
      var span = Math.max(nd.total, nd.kidSum);
      if (span <= 0 || !nd.kids.length) continue;
      var k = w / span, cx = x, small = null;
      for (var c = 0; c < nd.kids.length; c++) {
        var j = nd.kids[c], cw = nodes[j].total * k;
        if (cw < MIN_PX) {
          // Too narrow to draw alone: consecutive ones share one striped box.
          if (!small) small = { x: cx, w: 0, n: 0, s: 0, parent: t[0] };
          small.w += cw; small.n += 1; small.s += nodes[j].total;
        } else {
          if (small) { addSmall(frag, small, nd.depth + 1); small = null; }
          addBox(frag, j, cx, cw, nd.depth + 1, "");
          stack.push([j, cx, cw]);
        }
        cx += cw;
      }
      if (small) addSmall(frag, small, nd.depth + 1);
    }
  }

  function place(b, x, w, row) {
    b.style.left = x.toFixed(1) + "px";
    b.style.width = Math.max(1, w).toFixed(1) + "px";
    b.style.top = (row * ROW) + "px";
    if (w < 3) b.style.borderRight = "none";   // the white separator would hide a box this thin
    if (row + 1 > rows) rows = row + 1;
  }

  function addBox(frag, i, x, w, row, extra) {
    var nd = nodes[i];
    var b = el("div", "box k-" + (/^[a-z]+$/.test(nd.kind) ? nd.kind : "phase") + (nd.status === "error" ? " err" : "") +
      (extra ? " " + extra : ""));
    var col = nd.status === "error" ? null : colourOf(nd);
    if (col) b.style.background = col;
    place(b, x, w, row);
    if (w >= LABEL_PX) b.textContent = nd.name + " \u00b7 " + fmtS(nd.total);
    b.dataset.i = String(drawn.length);
    drawn.push({ node: i });
    frag.appendChild(b);
  }

  function addSmall(frag, small, row) {
    if (small.w < MIN_PX) return;   // not even one pixel together: the parent's gap shows them
    var b = el("div", "box k-small");
    place(b, small.x, small.w, row);
    b.dataset.i = String(drawn.length);
    drawn.push({ small: small });
    frag.appendChild(b);
  }

  function drawChart() {
    var chart = document.getElementById("chart");
    var width = Math.max(200, chart.clientWidth);
    drawn = [];
    rows = 0;
    var frag = document.createDocumentFragment();
    layout(frag, width);
    chart.replaceChildren(frag);
    chart.style.height = (rows * ROW + 1) + "px";
    document.getElementById("reset").disabled = zoom === 0;
    var crumbs = [];
    for (var i = zoom; i > 0; i = nodes[i].parent) crumbs.unshift(nodes[i].name);
    document.getElementById("crumbs").textContent = crumbs.length ? "zoomed into: " + crumbs.join(" \u203a ") : "";
    document.body.dataset.rendered = String(drawn.length);
  }

  function setZoom(i) {
    if (i < 0 || i >= nodes.length || i === zoom) return;
    zoom = i;
    hideTip();
    drawChart();
  }

  // -- tooltip -------------------------------------------------------------------
  var tip = document.getElementById("tip");
  function hideTip() { tip.style.display = "none"; }
  function tipLine(text, cls) { tip.appendChild(el("div", cls || null, text)); }
  function showTip(entry, ev) {
    tip.replaceChildren();
    var runTotal = Math.max(nodes[0].total, nodes[0].kidSum);
    if (entry.small) {
      var s = entry.small;
      tipLine(s.n + " boxes too narrow to draw", "t");
      tipLine("together: " + fmtS(s.s) + " (" + pct(s.s, runTotal) + " of the run)");
      tipLine("click to zoom into " + nodes[s.parent].name, "muted");
    } else {
      var nd = nodes[entry.node];
      tipLine(nd.name, "t");
      tipLine(nd.kind + (nd.status === "error" ? "" : nd.status ? " \u00b7 " + nd.status : ""), "muted");
      if (nd.status === "error") tipLine("this compile failed", "bad");
      tipLine("total: " + fmtS(nd.total) + " (" + pct(nd.total, runTotal) + " of the run)");
      tipLine("self: " + fmtS(nd.self));
      tipLine("count: " + nd.count);
      if (nd.detail) tipLine(nd.detail);
      if (nd.kidSum > nd.total * 1.001 && nd.kidSum - nd.total > 1e-6) {
        tipLine("children ran in parallel: " + fmtS(nd.kidSum) + " of work in " + fmtS(nd.total) +
          " (drawn scaled down to fit)", "note");
      }
      if (entry.node !== zoom) tipLine(nodes[entry.node].depth < nodes[zoom].depth ? "click to zoom out to here" : "click to zoom in", "muted");
    }
    tip.style.display = "block";
    moveTip(ev);
  }
  function moveTip(ev) {
    var pad = 14, w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + w > window.innerWidth) x = Math.max(0, ev.clientX - w - pad);
    if (y + h > window.innerHeight) y = Math.max(0, ev.clientY - h - pad);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function entryOf(ev) {
    var b = ev.target && ev.target.closest ? ev.target.closest(".box") : null;
    return b ? drawn[Number(b.dataset.i)] : null;
  }

  function initChart() {
    var chart = document.getElementById("chart");
    var tree = obj(S.tree);
    if (!arr(tree.children).length) {
      var msg = num(S.compiles) > 0 ? "this summary has no compile tree to draw" : "no compiles in this run";
      chart.replaceWith(el("div", "empty", msg));
      document.getElementById("reset").hidden = true;
      document.body.dataset.rendered = "0";
      return;
    }
    flatten(tree);
    var legend = document.getElementById("legend");
    [["k-run", "run"], ["k-frame", "frame"], ["k-compile", "compile"], ["k-phase", "phase"], ["k-more", "more compiles (folded)"],
     ["sw-err", "failed compile"], ["k-small", "too narrow to draw"]].forEach(function (p) {
      var s = el("span");
      s.appendChild(el("i", p[0]));
      s.appendChild(document.createTextNode(p[1]));
      legend.appendChild(s);
    });
    chart.addEventListener("mousemove", function (ev) {
      var e = entryOf(ev);
      if (e) showTip(e, ev); else hideTip();
    });
    chart.addEventListener("mouseleave", hideTip);
    chart.addEventListener("click", function (ev) {
      var e = entryOf(ev);
      if (!e) return;
      if (e.small) setZoom(e.small.parent);
      else setZoom(e.node);
    });
    document.getElementById("reset").addEventListener("click", function () { setZoom(0); });
    document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") setZoom(0); });
    var pending = 0;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () { guard("the chart", drawChart); }, 100);
    });
    drawChart();
  }

  // -- tables --------------------------------------------------------------------
  // cols: [header, cell(row) -> text, numeric?, bar(row) -> fraction 0..1]
  function table(rows, cols, rowClass) {
    var t = el("table"), head = el("tr");
    cols.forEach(function (c) { head.appendChild(el("th", c[2] ? "n" : null, c[0])); });
    t.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    rows.forEach(function (r) {
      r = obj(r);
      var tr = el("tr", rowClass ? rowClass(r) : null);
      cols.forEach(function (c) {
        var td = el("td", c[2] ? "n" : null, c[1](r));
        if (c[3]) {
          var f = Math.max(0, Math.min(1, num(c[3](r))));
          td.className += " bar";
          td.style.backgroundSize = (f * 100).toFixed(1) + "% 100%";
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }
  function section(title, note) {
    var s = el("section", "tbl");
    s.appendChild(el("h2", null, title));
    if (note) s.appendChild(el("p", "muted", note));
    document.getElementById("tables").appendChild(s);
    return s;
  }
  function none(s, text) { s.appendChild(el("p", "none", text)); }
  function countsOf(o) {
    return Object.keys(obj(o)).map(function (k) { return { name: k, count: num(o[k]) }; })
      .sort(function (a, b) { return b.count - a.count; });
  }

  function drawPhases() {
    var wall = num(S.wall_s), rows = arr(S.phases);
    var s = section("Time by phase", "self: time in the phase and not in one of its sub-phases; % of the compile wall time.");
    if (!rows.length) return none(s, "no phases");
    s.appendChild(table(rows, [
      ["phase", function (r) { return str(r.name); }],
      ["count", function (r) { return num(r.count); }, true],
      ["total s", function (r) { return fix3(r.total_s); }, true],
      ["self s", function (r) { return fix3(r.self_s); }, true],
      ["% of wall", function (r) { return pct(r.self_s, wall); }, true, function (r) { return wall > 0 ? num(r.self_s) / wall : 0; }]
    ]));
  }

  function drawFrames() {
    var wall = num(S.wall_s), rows = arr(S.frames);
    var s = section("Top frames", "the user functions whose compiles cost most.");
    if (!rows.length) return none(s, "no frames");
    s.appendChild(table(rows, [
      ["frame", function (r) { return where(r.function, r.file, r.line); }],
      ["compiles", function (r) { return num(r.compiles); }, true],
      ["total s", function (r) { return fix3(r.total_s); }, true],
      ["% of wall", function (r) { return pct(r.total_s, wall); }, true, function (r) { return wall > 0 ? num(r.total_s) / wall : 0; }]
    ]));
  }

  function drawSlowest() {
    var rows = arr(S.slowest);
    var s = section("Slowest compiles");
    if (!rows.length) return none(s, "no compiles");
    var ranks = rows.some(function (r) { return obj(r).rank !== undefined; });
    var cols = [
      ["id", function (r) { return str(r.id); }],
      ["kind", function (r) { return str(r.kind); }],
      ["frame", function (r) { return where(r.function, r.file, r.line); }],
      ["duration s", function (r) { return fix3(r.duration_s); }, true],
      ["status", function (r) { return r.status === "error" ? "FAILED" : str(r.status); }]
    ];
    if (ranks) cols.splice(1, 0, ["rank", function (r) { return str(r.rank); }, true]);
    s.appendChild(table(rows, cols, function (r) { return r.status === "error" ? "err" : null; }));
  }

  function drawRecompiles() {
    var rc = obj(S.recompiles);
    var s = section("Recompiles", num(rc.total) + " recompile" + (num(rc.total) === 1 ? "" : "s") + ".");
    var cats = countsOf(rc.by_category);
    if (!cats.length) return none(s, "no recompiles");
    s.appendChild(table(cats, [
      ["category", function (r) { return r.name; }],
      ["count", function (r) { return r.count; }, true]
    ]));
    var reasons = arr(rc.top_reasons);
    if (reasons.length) {
      s.appendChild(el("h3", null, "Top reasons"));
      s.appendChild(table(reasons, [
        ["category", function (r) { return str(r.category); }],
        ["reason", function (r) { return str(r.reason); }],
        ["count", function (r) { return num(r.count); }, true]
      ]));
    }
  }

  function drawGraphBreaks() {
    var gb = obj(S.graph_breaks), rows = arr(gb.by_code);
    var s = section("Graph breaks", num(gb.total) + " graph break" + (num(gb.total) === 1 ? "" : "s") + ".");
    if (!rows.length) return none(s, "no graph breaks");
    s.appendChild(table(rows, [
      ["code", function (r) { return str(r.code); }],
      ["type", function (r) { return str(r.type); }],
      ["count", function (r) { return num(r.count); }, true]
    ]));
  }

  function drawCache() {
    var rows = arr(S.cache);
    var s = section("Cache lookups");
    if (!rows.length) return none(s, "no cache lookups");
    s.appendChild(table(rows, [
      ["cache", function (r) { return str(r.cache); }],
      ["location", function (r) { return str(r.location); }],
      ["result", function (r) { return str(r.result); }],
      ["count", function (r) { return num(r.count); }, true]
    ]));
  }

  function drawFailures() {
    var fl = obj(S.failures), types = countsOf(fl.by_type);
    var s = section("Failures",
      num(fl.total) + " failed compile" + (num(fl.total) === 1 ? "" : "s") + "; " +
      num(S.recompile_limit_hits) + " recompile-limit hit" + (num(S.recompile_limit_hits) === 1 ? "" : "s") + "; " +
      num(S.eager_fallbacks) + " frame" + (num(S.eager_fallbacks) === 1 ? "" : "s") + " left in eager.");
    if (!types.length) return none(s, "no failures");
    s.appendChild(table(types, [
      ["failure", function (r) { return r.name; }],
      ["count", function (r) { return r.count; }, true]
    ], function () { return "err"; }));
  }

  guard("the header", drawHeader);
  guard("the chart", initChart);
  [["time by phase", drawPhases], ["top frames", drawFrames], ["slowest compiles", drawSlowest],
   ["recompiles", drawRecompiles], ["graph breaks", drawGraphBreaks], ["cache lookups", drawCache],
   ["failures", drawFailures]].forEach(function (p) { guard(p[0], p[1]); });
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
})();
</script>
</body>
</html>
"""


def _plain(value: Any) -> Any:
    """``value`` with NaN and infinities as null: JSON.parse rejects them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _script_json(summary: Mapping[str, Any]) -> str:
    """The summary as JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left literal."""
    text = json.dumps(_plain(summary), default=str, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _title(summary: Mapping[str, Any]) -> str:
    source = summary.get("source") or "unknown"
    compiles = summary.get("compiles") or 0
    return html.escape(f"torch.compile run summary ({source}, {compiles} compiles)")


def render_html(summary: Mapping[str, Any]) -> str:
    """One self-contained HTML page (no network) showing where the run's compile time went.

    ``summary`` is :meth:`RunSummary.to_dict`; missing fields are shown as empty.
    """
    return _PAGE_HEAD + _title(summary) + _STYLE + _BODY_START + _script_json(summary) + _SCRIPT
