(function () {
  "use strict";
  var ROW = 20, MIN_PX = 1, LABEL_PX = 28;

  // -- small helpers: page-kit.js's, shared with the diff page; then this page's own --------------------
  var K = window.TorchOtelPage;
  var num = K.num, arr = K.arr, obj = K.obj, str = K.str, el = K.el, fix3 = K.fix3, where = K.where;
  var guard = K.guard, link = K.link, none = K.none, card = K.card, section = K.section;
  function fmtS(s) {
    s = num(s);
    var a = Math.abs(s);
    if (a === 0) return "0 s";
    if (a < 1e-3) return (s * 1e6).toFixed(0) + " \u00b5s";
    if (a < 1) return (s * 1e3).toFixed(a < 0.01 ? 2 : a < 0.1 ? 1 : 0) + " ms";
    if (a < 100) return s.toFixed(a < 10 ? 2 : 1) + " s";
    return Math.round(s).toLocaleString("en-US") + " s";
  }
  function pct(part, whole) { whole = num(whole); return whole > 0 ? (100 * num(part) / whole).toFixed(1) + "%" : "\u2013"; }
  function plural(n, word, many) { return n === 1 ? word : (many || word + "s"); }
  function count(n, word, many) { return n + " " + plural(n, word, many); }
  var SHOWN_PHASE_SHARE = 0.01, MIN_PHASES = 3, MAX_PHASES = 12;   // the phase table: those carrying time; the rest folded

  var started = performance.now();
  var S = {};
  guard("the summary", function () { S = obj(JSON.parse(document.getElementById("summary").textContent)); });
  // What a feature's part of this page (K.part) draws with: the summary, and this page's helpers beside the kit's
  var P = { S: S, fmtS: fmtS, pct: pct, plural: plural, count: count, table: table, countsOf: countsOf };
  Object.keys(K).forEach(function (k) { if (!(k in P)) P[k] = K[k]; });

  // -- header ----------------------------------------------------------------
  function drawHeader() {
    var head = document.getElementById("head");
    var compiles = num(S.compiles);
    head.appendChild(el("h1", null, "torch.compile run summary"));
    var kinds = Object.keys(obj(S.by_kind)).map(function (k) { return num(S.by_kind[k]) + " " + k; }).join(", ");
    head.appendChild(el("div", "muted", "source: " + (str(S.source) || "unknown") + (kinds ? " \u00b7 " + kinds : "")));
    // The tiles, what matters first: the compile time, the caches (could it have been skipped?), then what went wrong.
    var cards = el("div", "cards");
    cards.id = "tiles";
    card(cards, String(compiles), plural(compiles, "compile"));
    card(cards, fmtS(S.wall_s), "compile time (wall, summed over compiles)");
    K.tiles("summary", P, cards);   // each feature's tiles (the caches' hit rates): could the time have been skipped?
    var recompiles = num(obj(S.recompiles).total), breaks = num(obj(S.graph_breaks).total);
    card(cards, String(recompiles), plural(recompiles, "recompile"));
    card(cards, String(breaks), plural(breaks, "graph break"));
    var failed = num(obj(S.failures).total);
    card(cards, String(failed), plural(failed, "failure"), failed > 0);
    var limit = num(S.recompile_limit_hits);
    card(cards, String(limit), plural(limit, "recompile-limit hit"), limit > 0);
    // frames, where the summary lists them (an older one counts the compiles that left their frame in eager)
    var eager = Array.isArray(S.eager_frames) ? S.eager_frames.length : num(S.eager_fallbacks);
    if (eager > 0) card(cards, String(eager), plural(eager, "frame") + " left in eager", true);
    if (S.cpu_s !== null && S.cpu_s !== undefined) card(cards, fmtS(S.cpu_s), "CPU time while compiling");
    if (num(S.first_to_last_s) > 0) card(cards, fmtS(S.first_to_last_s), "first to last compile");
    var rt = obj(S.runtime);
    if (num(rt.records) > 0) card(cards, fmtS(rt.total_s), count(num(rt.records), "runtime record") + " (not compile time)");
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
    // a box too narrow for a label has no padding: padding would draw it wider than its time, over its neighbour
    if (w < LABEL_PX) b.style.padding = "0";
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
  // cols: [header, cell(row) -> text, numeric?, bar(row) -> fraction 0..1, class of a text cell ("nw": no wrap)]
  function table(rows, cols, rowClass) {
    var t = el("table"), head = el("tr");
    cols.forEach(function (c) { head.appendChild(el("th", c[2] ? "n" : null, c[0])); });
    t.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    rows.forEach(function (r) {
      r = obj(r);
      var tr = el("tr", rowClass ? rowClass(r) : null);
      cols.forEach(function (c) {
        var td = el("td", c[2] ? "n" : (c[4] || null), c[1](r));
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
  function countsOf(o) {
    return Object.keys(obj(o)).map(function (k) { return { name: k, count: num(o[k]) }; })
      .sort(function (a, b) { return b.count - a.count; });
  }

  // Time by phase: the phases that carry time (each at least 1% of the compile time; 3 to 12 of them), the others
  // folded under one line that opens to their table. The share says what it is a share of, and when the self times
  // add up to more than the compile time (parallel builds, each counted), the table says so under it.
  function drawPhases() {
    var wall = num(S.wall_s);
    var rows = arr(S.phases).slice().sort(function (a, b) { return num(obj(b).self_s) - num(obj(a).self_s); });
    var s = section("Time by phase", "self: time in the phase and not in one of its sub-phases. " +
      "% of compile time: of the " + fmtS(wall) + " the compiles took (wall, summed over compiles).");
    if (!rows.length) return none(s, "no phases");
    var cols = [
      ["phase", function (r) { return str(r.name); }],
      ["count", function (r) { return num(r.count); }, true],
      ["total s", function (r) { return fix3(r.total_s); }, true],
      ["self s", function (r) { return fix3(r.self_s); }, true],
      ["self, % of compile time", function (r) { return pct(r.self_s, wall); }, true,
        function (r) { return wall > 0 ? num(r.self_s) / wall : 0; }]
    ];
    var shown = 0;
    while (shown < rows.length && shown < MAX_PHASES &&
           (shown < MIN_PHASES || num(obj(rows[shown]).self_s) >= SHOWN_PHASE_SHARE * wall)) shown++;
    if (rows.length - shown === 1) shown++;   // one row folded would take the line that folds it
    var t = table(rows.slice(0, shown), cols);
    t.id = "phases";
    s.appendChild(t);
    var rest = rows.slice(shown);
    if (rest.length) {
      var restSelf = rest.reduce(function (a, r) { return a + num(obj(r).self_s); }, 0);
      var more = el("details", "more");
      more.id = "more-phases";
      more.appendChild(el("summary", null, count(rest.length, "more phase") + ", each under " +
        (100 * SHOWN_PHASE_SHARE).toFixed(0) + "% of the compile time: " + fix3(restSelf) + " s self in all (" +
        pct(restSelf, wall) + ")"));
      more.appendChild(table(rest, cols));
      s.appendChild(more);
    }
    var selfSum = rows.reduce(function (a, r) { return a + num(obj(r).self_s); }, 0);
    if (wall > 0 && selfSum > wall * 1.005) {
      var over = el("p", "note", "These shares add up to " + pct(selfSum, wall) + " of the compile time, more than 100%: " +
        "work that ran in parallel (inductor's kernel builds, compile_file, on its worker threads) counts each build's own " +
        "time, and the compile's wall time holds them only once.");
      over.id = "phases-over-100";
      s.appendChild(over);
    }
  }

  function drawFrames() {
    var wall = num(S.wall_s), rows = arr(S.frames);
    var s = section("Top frames", "the user functions whose compiles cost most; % of compile time: of the " + fmtS(wall) +
      " the compiles took.");
    if (!rows.length) return none(s, "no frames");
    s.appendChild(table(rows, [
      ["frame", function (r) { return where(r.function, r.file, r.line, r.call_site); }],
      ["compiles", function (r) { return num(r.compiles); }, true],
      ["total s", function (r) { return fix3(r.total_s); }, true],
      ["% of compile time", function (r) { return pct(r.total_s, wall); }, true,
        function (r) { return wall > 0 ? num(r.total_s) / wall : 0; }]
    ]));
  }

  function drawSlowest() {
    var rows = arr(S.slowest);
    var s = section("Slowest compiles");
    if (!rows.length) return none(s, "no compiles");
    var ranks = rows.some(function (r) { return obj(r).rank !== undefined; });
    var cols = [
      ["id", function (r) { return str(r.id); }, false, null, "nw"],
      ["kind", function (r) { return str(r.kind); }, false, null, "nw"],
      ["frame", function (r) { return where(r.function, r.file, r.line, r.call_site); }],
      ["duration s", function (r) { return fix3(r.duration_s); }, true],
      ["status", function (r) { return r.status === "error" ? "FAILED" : str(r.status); }, false, null, "nw"]
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

  // The frames that recompiled: how close each is to the recompile limit, the guard that keeps failing, the fix.
  function drawRecompiling() {
    var rows = arr(S.recompiling_frames);
    if (!rows.length) return;
    var s = section("Frames that keep recompiling",
      "per frame: its recompiles, how close it is to torch._dynamo.config.recompile_limit, the guard that failed " +
      "and, where torch's reason makes it clear, the change that stops it.");
    rows.forEach(function (f) {
      f = obj(f);
      // a hit before torch._dynamo.reset() no longer sends the frame to eager: the reset emptied its cache
      var past = num(f.limit_hits_before_reset), hit = num(f.limit_hits) > past;
      var lim = f.limit === null || f.limit === undefined ? (hit ? "hit the limit: runs in eager" : "limit unknown") :
        hit ? "hit the limit (" + num(f.limit) + "): runs in eager" :
        num(f.cache_entries) + " of " + num(f.limit) + " compiles, " + num(f.left_before_limit) + " more before eager";
      if (past > 0 && !hit) lim += " (hit before a reset)";
      s.appendChild(el("h3", hit || f.limit_status === "near" ? "fail" : null,
        where(f.function, f.file, f.line, f.call_site) + ": " + count(num(f.recompiles), "recompile") + ", " + lim));
      var ul = el("ul");
      arr(f.guards).forEach(function (g) { ul.appendChild(el("li", null, str(obj(g).line))); });
      arr(f.fixes).forEach(function (x) {
        x = obj(x);
        var li = el("li");
        li.appendChild(el("b", null, "fix: "));
        li.appendChild(el("code", null, str(x.fix)));
        li.appendChild(document.createTextNode(" " + str(x.why) + " "));
        li.appendChild(link(x.link));
        ul.appendChild(li);
      });
      if (f.unclear) ul.appendChild(el("li", "muted", str(f.unclear)));
      if (f.evidence) ul.appendChild(el("li", null, "evidence: " + str(obj(f.evidence).line)));
      s.appendChild(ul);
    });
  }

  // The frames torch left in eager: the costliest outcome, first (which frame, why, where the break is).
  function drawEager() {
    var rows = arr(S.eager_frames);
    if (!rows.length) return;
    var s = section("Frames left in eager",
      "torch runs these frames' whole work uncompiled: their compile time fell, which is no improvement.");
    s.id = "eager-frames";
    var ul = el("ul");
    rows.forEach(function (r) {
      r = obj(r);
      var li = el("li", "fail");
      li.appendChild(el("b", null, where(r.function, r.file, r.line, r.call_site) + ": "));
      li.appendChild(document.createTextNode(str(r.text || r.why)));
      if (r.code) {
        li.appendChild(el("div", "muted", "the break: " + str(r.code) + " " + str(r.type || "") +
          (r.explanation ? ": " + str(r.explanation) : "")));
      }
      ul.appendChild(li);
    });
    s.appendChild(ul);
  }

  guard("the header", drawHeader);
  guard("the chart", initChart);
  guard("frames left in eager", drawEager);
  // The sections, two to a row: where the time went, whether a warm cache would have saved it (the caches' part),
  // what recompiled or broke, then the details; each feature's where it says.
  K.placed([["time by phase", drawPhases], ["top frames", drawFrames],
   ["recompiles", drawRecompiles], ["graph breaks", drawGraphBreaks], ["failures", drawFailures],
   ["recompiling frames", drawRecompiling], ["slowest compiles", drawSlowest],
   ["cache lookups", drawCache]], "summary", P).forEach(function (p) { guard(p[0], p[1]); });
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
})();
