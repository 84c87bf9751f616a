// Graph calls' part of the pages (torch_otel._features.graph_calls): how often each compiled graph ran, on the run
// summary's page (a live run) and on the diff's (where both runs counted them). Inlined after the pages' kit.
(function () {
  "use strict";

  // How often each compiled graph ran (a live run): which compiles paid for themselves, and which were thrown away.
  function drawGraphCalls(P) {
    var S = P.S, num = P.num, arr = P.arr, obj = P.obj, str = P.str, el = P.el, fix3 = P.fix3, where = P.where;
    var fmtS = P.fmtS, pct = P.pct, table = P.table, section = P.section;
    if (!S.graph_calls || typeof S.graph_calls !== "object") return;
    var c = obj(S.graph_calls), at = arr(c.ran_at_most);
    var once = obj(at.filter(function (r) { return num(obj(r).calls) === 1; })[0]);
    var s = section("Graph calls: did compiling pay off",
      num(c.graphs) + " compiled graph" + (num(c.graphs) === 1 ? "" : "s") + " ran " + num(c.calls).toLocaleString("en-US") +
      " times; " + num(once.compiles) + " ran at most once (the call that compiled them): " + fmtS(once.compile_s) +
      " of compiling, " + pct(once.compile_s, once.of_compile_s) + " of all compile time." +
      (num(c.uncounted) ? " " + num(c.uncounted) + " compile(s) not counted (past the bound)." : ""));
    s.appendChild(table(at, [
      ["graphs that ran at most", function (r) { return num(r.calls) + " time" + (num(r.calls) === 1 ? "" : "s"); }],
      ["graphs", function (r) { return num(r.compiles); }, true],
      ["compile s", function (r) { return fix3(r.compile_s); }, true],
      ["of all compile time", function (r) { return pct(r.compile_s, r.of_compile_s); }, true, function (r) { return num(r.share); }]
    ]));
    arr(c.frames).forEach(function (f) {
      f = obj(f);
      s.appendChild(el("h3", num(f.dead) ? "fail" : null, where(f.function, f.file, f.line) + ": " + num(f.compiles) +
        " graph" + (num(f.compiles) === 1 ? "" : "s") + ", " + fmtS(f.compile_s) + " compiling, " + num(f.dead) +
        " ran at most once (" + fmtS(f.dead_compile_s) + ")"));
      s.appendChild(table(arr(f.graphs), [
        ["graph", function (r) { return str(r.id); }, false, null, "nw"],
        ["pass", function (r) { return r.kind === "backward" ? "backward" : "forward"; }, false, null, "nw"],
        ["calls", function (r) { return num(r.calls).toLocaleString("en-US"); }, true],
        ["compile", function (r) { return r.with_forward ? "with its forward" : fmtS(r.compile_s); }, true],
        ["compile per call", function (r) { return r.compile_s_per_call === null ? "\u2013" : fmtS(r.compile_s_per_call); }, true],
        ["run per call", function (r) { return r.run_s_mean === null || r.run_s_mean === undefined ? "\u2013" : fmtS(r.run_s_mean); }, true]
      ], function (r) { return num(r.calls) <= 1 ? "err" : null; }));
      if (num(f.more_graphs)) s.appendChild(el("p", "muted", "(" + num(f.more_graphs) + " more graphs: the JSON lists them)"));
    });
  }

  // How often each frame's compiled graphs ran, on both sides (where both runs counted them: live runs).
  function drawGraphCallsDiff(P) {
    var D = P.D, num = P.num, arr = P.arr, obj = P.obj, str = P.str, fix3 = P.fix3, where = P.where;
    var table = P.table, section = P.section;
    if (!D.graph_calls || typeof D.graph_calls !== "object") return;
    var g = obj(D.graph_calls);
    var s = section("Graph calls",
      num(g.base_calls).toLocaleString("en-US") + " \u2192 " + num(g.new_calls).toLocaleString("en-US") + " calls of " +
      num(g.base_graphs) + " \u2192 " + num(g.new_graphs) + " compiled graphs; ran at most once: " + num(g.base_ran_once) +
      " (" + fix3(g.base_ran_once_compile_s) + " s compiling) \u2192 " + num(g.new_ran_once) + " (" +
      fix3(g.new_ran_once_compile_s) + " s).");
    s.appendChild(table(arr(g.frames), [
      ["frame", function (x) { return where(x.function, x.file, x.line) + (x.status === "both" ? "" : " (" + str(x.status) + ")"); }],
      ["base calls", function (x) { return num(x.base_calls).toLocaleString("en-US"); }, true],
      ["new calls", function (x) { return num(x.new_calls).toLocaleString("en-US"); }, true],
      ["graphs", function (x) { return num(x.base_compiles) + " \u2192 " + num(x.new_compiles); }, true],
      ["ran at most once", function (x) { return num(x.base_dead) + " \u2192 " + num(x.new_dead); }, true]
    ], function (x) { return num(x.new_dead) > num(x.base_dead) ? "err" : null; }));
    P.drew();
  }

  window.TorchOtelPage.part({
    summary: { sections: [["graph calls", drawGraphCalls]] },
    diff: { sections: [["graph calls", drawGraphCallsDiff]] }
  });
})();
