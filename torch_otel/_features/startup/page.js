// The start-up's part of the pages (torch_otel._features.startup): the time from the process's start to its first
// step, by phase, on the run summary's page (a live run), and two start-ups compared on the diff's. Inlined after
// the pages' kit.
(function () {
  "use strict";

  var WORDS = {
    interpreter: "interpreter", bridge: "torch-otel", imports: "imports", distributed_init: "distributed init",
    weights: "weights", data: "data", compile: "compile", cuda_init: "CUDA init", cudagraph_capture: "cudagraph capture",
    waiting_for_ranks: "waiting for ranks", first_step: "first step", unattributed: "unattributed",
    first_step_total: "time to first step", cache_saved: "saved by cache hits"
  };
  var ENDS = { step: "first step", forward: "first forward", ready: "ready", exit: "exit (no first step)" };

  function rows(st, num, obj) {
    var out = [], ph = obj(st.phases);
    Object.keys(ph).forEach(function (k) { if (num(ph[k]) > 0) out.push({ name: k, s: num(ph[k]) }); });
    out.push({ name: "unattributed", s: num(st.unattributed_s) });  // tables take objects (the kit reads rows with obj)
    out.sort(function (a, b) { return b.s - a.s; });
    return out;
  }

  function tiles(P, cards) {
    var S = P.S, num = P.num, obj = P.obj, str = P.str;
    if (!S.startup || typeof S.startup !== "object") return;
    var st = obj(S.startup);
    P.card(cards, P.fmtS(st.first_step_s), "to " + (ENDS[str(st.end)] || str(st.end)) + " from the process's start",
      false);
  }

  function draw(P) {
    var S = P.S, num = P.num, obj = P.obj, str = P.str, table = P.table, section = P.section, fmtS = P.fmtS;
    if (!S.startup || typeof S.startup !== "object") return;
    var st = obj(S.startup), total = num(st.first_step_s), c = obj(st.cache);
    var head = (ENDS[str(st.end)] || str(st.end)) + " after " + fmtS(total) +
      (num(st.second_step_s) ? "; the second took " + fmtS(st.second_step_s) : "") +
      (num(c.saved_s) ? "; cache hits saved " + fmtS(c.saved_s) + " of compiling" : "") +
      (st.why ? ". " + str(st.why) : "");
    var s = section("Start-up: from the process's start to its first step", head);
    s.appendChild(table(rows(st, num, obj), [
      ["phase", function (r) { return WORDS[r.name] || r.name; }, false, null, "nw"],
      ["seconds", function (r) { return num(r.s).toFixed(3); }, true],
      ["of the start-up", function (r) { return P.pct(r.s, total); }, true, function (r) { return total > 0 ? num(r.s) / total : 0; }]
    ], function (r) { return r.name === "unattributed" && total > 0 && num(r.s) / total > 0.2 ? "err" : null; }));
  }

  function drawDiff(P) {
    var D = P.D, num = P.num, arr = P.arr, obj = P.obj, table = P.table, section = P.section;
    if (!D.startup || typeof D.startup !== "object") return;
    var d = obj(D.startup), ch = arr(d.changes).map(obj);
    var total = ch.filter(function (r) { return r.name === "first_step_total"; })[0] || {};
    var s = section("Start-up", "time to first step " + num(total.base_s).toFixed(2) + " s \u2192 " +
      num(total.new_s).toFixed(2) + " s");
    s.appendChild(table(ch.filter(function (r) { return num(r.base_s) || num(r.new_s); }), [
      ["", function (r) { return WORDS[r.name] || r.name; }, false, null, "nw"],
      ["base s", function (r) { return num(r.base_s).toFixed(3); }, true],
      ["new s", function (r) { return num(r.new_s).toFixed(3); }, true],
      ["change", function (r) { return (num(r.delta_s) >= 0 ? "+" : "") + num(r.delta_s).toFixed(3); }, true]
    ], function (r) { return r.name !== "cache_saved" && num(r.delta_s) > 1 ? "err" : null; }));
    P.drew();
  }

  window.TorchOtelPage.part({
    summary: { tiles: tiles, sections: [["start-up", draw, "time by phase"]] },  // first: the time around the compiles
    diff: { sections: [["start-up", drawDiff]] }
  });
})();
