(function () {
  "use strict";

  // -- small helpers: page-kit.js's, shared with the run summary page; then this page's own --------------------
  var K = window.TorchOtelPage;
  var num = K.num, arr = K.arr, obj = K.obj, str = K.str, el = K.el, fix3 = K.fix3, where = K.where;
  var guard = K.guard, link = K.link, none = K.none, card = K.card, section = K.section;
  function signed(s) { s = num(s); return (s > 0 ? "+" : "") + s.toFixed(3); }
  function pctText(p) { return p === null || p === undefined ? "" : (num(p) > 0 ? "+" : "") + num(p).toFixed(0) + "%"; }
  function rate(v) { return v === null || v === undefined ? "\u2013" : (100 * num(v)).toFixed(0) + "%"; }

  var started = performance.now();
  var D = {};
  guard("the diff", function () { D = obj(JSON.parse(document.getElementById("diff").textContent)); });
  var drawn = 0;
  // What a feature's part of this page (K.part) draws with: the diff, and this page's helpers beside the kit's
  var P = { D: D, table: table, rate: rate, signed: signed, pctText: pctText, updown: updown,
            drew: function () { drawn += 1; } };
  Object.keys(K).forEach(function (k) { if (!(k in P)) P[k] = K[k]; });

  // cols: [header, cell(row) -> text, numeric?, class(row) -> extra class]
  function table(rows, cols, rowClass, deltaOf, deltaMax) {
    var t = el("table"), head = el("tr");
    cols.forEach(function (c) { head.appendChild(el("th", c[2] ? "n" : null, c[0])); });
    t.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    rows.forEach(function (r) {
      r = obj(r);
      var tr = el("tr", rowClass ? rowClass(r) : null);
      cols.forEach(function (c) {
        var td = el("td", c[2] ? "n" : null, c[1](r));
        var extra = c[3] ? c[3](r) : "";
        if (extra) td.className += " " + extra;
        if (extra && extra.indexOf("delta") >= 0 && deltaOf && deltaMax > 0) {
          td.style.backgroundSize = (100 * Math.min(1, Math.abs(num(deltaOf(r))) / deltaMax)).toFixed(1) + "% 100%";
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
      drawn += 1;
    });
    t.appendChild(body);
    return t;
  }
  function updown(v) { v = num(v); return v > 0 ? "up" : v < 0 ? "down" : ""; }

  // -- header: the two sides, what is compared, the gate ------------------------------------------------------
  function drawHeader() {
    var head = document.getElementById("head");
    head.appendChild(el("h1", null, "torch-otel diff"));
    var sides = el("div", "sides");
    [["base", obj(D.base)], ["new", obj(D["new"])]].forEach(function (p) {
      sides.appendChild(el("b", null, p[0]));
      sides.appendChild(el("span", null, str(p[1].path) + "  (" + str(p[1].describe) + ")"));
    });
    head.appendChild(sides);
    var notes = arr(D.compared);
    if (notes.length) {
      var ul = el("ul", "notes");
      notes.forEach(function (n) { ul.appendChild(el("li", null, str(n))); });
      head.appendChild(ul);
    }
    var gate = D.gate;
    if (gate) {
      gate = obj(gate);
      head.appendChild(el("div", gate.passed ? "gate ok" : "gate bad",
        (gate.passed ? "gate passed" : "gate FAILED, exit " + num(gate.exit)) + " (" + str(gate.conditions) + ")"));
      if (!gate.passed) {
        var fl = el("ul", "notes");
        arr(gate.failed).forEach(function (f) { fl.appendChild(el("li", null, str(obj(f).text))); });
        head.appendChild(fl);
      }
    }
    var t = obj(D.total), cards = el("div", "cards");
    card(cards, fix3(t.base_s) + " s", "base compile time");
    card(cards, fix3(t.new_s) + " s", "new compile time");
    card(cards, signed(t.change_s) + " s " + pctText(t.change_pct), "change", num(t.change_s) > 0 && arr(D.flags).length > 0);
    card(cards, num(t.base_compiles) + " \u2192 " + num(t.new_compiles), "compiles");
    var g = obj(D.graph_breaks), r = obj(D.recompiles), f = obj(D.failures);
    card(cards, num(g.base_total) + " \u2192 " + num(g.new_total), "graph breaks", arr(g["new"]).length > 0);
    card(cards, num(r.base_total) + " \u2192 " + num(r.new_total), "recompiles", arr(r["new"]).length > 0);
    card(cards, num(f.base_total) + " \u2192 " + num(f.new_total), "failures", arr(f["new"]).length > 0);
    head.appendChild(cards);
  }

  function drawFrames() {
    var rows = arr(D.frames);
    var s = section("Frames, side by side", "matched by function and file:line (compile ids shift when code changes).");
    if (!rows.length) return none(s, "no frames on either side");
    var max = Math.max.apply(null, rows.map(function (x) { return Math.abs(num(obj(x).change_s)); }).concat([0]));
    s.appendChild(table(rows, [
      ["frame", function (x) { return where(x.function, x.file, x.line, x.call_site); }],
      ["base compiles", function (x) { return num(x.base_compiles); }, true],
      ["new compiles", function (x) { return num(x.new_compiles); }, true],
      ["base s", function (x) { return fix3(x.base_s); }, true],
      ["new s", function (x) { return fix3(x.new_s); }, true],
      ["change s", function (x) { return signed(x.change_s) + " " + pctText(x.change_pct); }, true,
        function (x) { return "delta " + updown(x.change_s); }]
    ], function (x) { return x.status === "new" ? "new" : x.status === "gone" ? "gone" : null; },
    function (x) { return x.change_s; }, max));
  }

  function drawPhases() {
    var rows = arr(D.phases);
    var s = section("Phases, self time", "a phase's time not spent in one of its sub-phases.");
    if (!rows.length) return none(s, "no phases");
    var max = Math.max.apply(null, rows.map(function (x) { return Math.abs(num(obj(x).change_s)); }).concat([0]));
    s.appendChild(table(rows, [
      ["phase", function (x) { return str(x.name); }],
      ["base s", function (x) { return fix3(x.base_self_s); }, true],
      ["new s", function (x) { return fix3(x.new_self_s); }, true],
      ["change s", function (x) { return signed(x.change_s); }, true, function (x) { return "delta " + updown(x.change_s); }]
    ], null, function (x) { return x.change_s; }, max));
  }

  function gbRows(g, status) {
    return arr(g[status]).map(function (x) { x = obj(x); return { s: status, x: x }; });
  }
  function drawGraphBreaks() {
    var g = obj(D.graph_breaks);
    var rows = gbRows(g, "new").concat(gbRows(g, "gone"));
    var s = section("Graph breaks", num(g.base_total) + " \u2192 " + num(g.new_total) + ", by code and location.");
    if (!rows.length) return none(s, "none new, none gone");
    s.appendChild(table(rows, [
      ["code", function (r) { return str(r.x.code); }],
      ["type", function (r) { return str(r.x.type); }],
      ["where", function (r) { return r.x.file ? where(r.x.frame || "", r.x.file, r.x.line).trim() : ""; }],
      ["count", function (r) { return num(r.x.count); }, true]
    ], function (r) { return r.s; }));
  }

  function drawRecompiles() {
    var r = obj(D.recompiles);
    var s = section("Recompiles", num(r.base_total) + " \u2192 " + num(r.new_total) + ".");
    var cats = Object.keys(obj(r.by_category)).map(function (k) { return { name: k, v: obj(r.by_category[k]) }; });
    if (cats.length) {
      s.appendChild(table(cats, [
        ["category", function (c) { return c.name; }],
        ["base", function (c) { return num(c.v.base); }, true],
        ["new", function (c) { return num(c.v["new"]); }, true]
      ]));
    }
    var rows = arr(r["new"]).map(function (x) { return { s: "new", x: obj(x) }; })
      .concat(arr(r.gone).map(function (x) { return { s: "gone", x: obj(x) }; }));
    if (!rows.length) return none(s, "no category new or gone");
    s.appendChild(el("h3", null, "Categories new or gone"));
    s.appendChild(table(rows, [
      ["category", function (c) { return str(c.x.category); }],
      ["frame", function (c) { return str(c.x.frame); }],
      ["count", function (c) { return num(c.x.count); }, true],
      ["top reason", function (c) { return str(arr(c.x.reasons)[0]); }]
    ], function (c) { return c.s; }));
  }

  function drawFailures() {
    var f = obj(D.failures), lh = obj(f.limit_hits);
    var s = section("Failures and recompile-limit hits",
      "failures " + num(f.base_total) + " \u2192 " + num(f.new_total) + "; recompile-limit hits " + num(lh.base) +
      " \u2192 " + num(lh["new"]) + ".");
    var rows = arr(f["new"]).map(function (x) { x = obj(x); return { what: str(x.type), where: where(x.function, x.file, x.line, x.call_site), n: x.count }; })
      .concat(arr(lh.new_frames).map(function (x) { x = obj(x); return { what: "recompile-limit hit", where: str(x.frame), n: x.count }; }));
    if (!rows.length) return none(s, "none new");
    s.appendChild(table(rows, [
      ["new", function (x) { return x.what; }],
      ["where", function (x) { return x.where; }],
      ["count", function (x) { return num(x.n); }, true]
    ], function () { return "err"; }));
  }

  function drawRecompiling() {
    var rows = arr(D.recompiling_frames);
    if (!rows.length) return;
    var s = section("Frames that keep recompiling (new side)",
      "the guard that keeps failing and, where torch's reason makes it clear, the change that stops it.");
    rows.forEach(function (f) {
      f = obj(f);
      // a hit before torch._dynamo.reset() no longer sends the frame to eager: the reset emptied its cache
      var past = num(f.limit_hits_before_reset), hit = num(f.limit_hits) > past;
      var lim = f.limit === null || f.limit === undefined ? (hit ? "hit the limit: runs in eager" : "limit unknown") :
        hit ? "hit the limit (" + num(f.limit) + "): runs in eager" :
        num(f.cache_entries) + " of " + num(f.limit) + " compiles, " + num(f.left_before_limit) + " more before eager";
      if (past > 0 && !hit) lim += " (hit before a reset)";
      s.appendChild(el("h3", hit || f.limit_status === "near" ? "fail" : null,
        where(f.function, f.file, f.line, f.call_site) + ": " + num(f.base_recompiles) + " \u2192 " + num(f.recompiles) + " recompiles, " + lim));
      var ul = el("ul", "fixes");
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
      s.appendChild(ul);
      drawn += 1;
    });
  }

  function drawRanks() {
    var rk = obj(D.ranks);
    if (!arr(rk.per_rank).length) return;
    var s = section("Ranks", "compared one to one: " + arr(rk.compared).join(", ") + "; changed: " +
      (arr(rk.changed).join(", ") || "none") +
      (arr(rk.only_base).length ? "; only in base: " + arr(rk.only_base).join(", ") : "") +
      (arr(rk.only_new).length ? "; only in new: " + arr(rk.only_new).join(", ") : "") + ".");
    s.appendChild(table(arr(rk.per_rank), [
      ["rank", function (x) { return num(x.rank); }, true],
      ["base s", function (x) { return fix3(obj(x.total).base_s); }, true],
      ["new s", function (x) { return fix3(obj(x.total).new_s); }, true],
      ["change s", function (x) { return signed(obj(x.total).change_s); }, true, function (x) { return updown(obj(x.total).change_s); }],
      ["what changed", function (x) { return arr(x.flags).map(function (f) { return str(obj(f).text); }).join("; ") || "nothing flagged"; }]
    ], function (x) { return arr(x.flags).length ? "err" : null; }));
  }

  guard("the header", drawHeader);
  K.placed([["frames", drawFrames], ["phases", drawPhases], ["graph breaks", drawGraphBreaks], ["recompiles", drawRecompiles],
   ["failures", drawFailures], ["recompiling frames", drawRecompiling], ["ranks", drawRanks]], "diff", P)
    .forEach(function (p) { guard(p[0], p[1]); });
  document.body.dataset.rendered = String(drawn);
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
})();
