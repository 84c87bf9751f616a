// Cache lookups' part of the pages (torch_otel._features.cache_lookups): the caches' tiles and cold and warm starts on the
// run summary's page, the caches' comparison on the diff's. Inlined after the pages' kit.
(function () {
  "use strict";

  // Hits and misses per cache: torch's counts (caches.hit_rate) where the summary has them, else its lookups.
  function cacheRates(P) {
    var S = P.S, num = P.num, arr = P.arr, obj = P.obj, str = P.str;
    var rates = {}, given = obj(obj(S.caches).hit_rate);
    Object.keys(given).forEach(function (k) { rates[k] = { hits: num(obj(given[k]).hits), misses: num(obj(given[k]).misses) }; });
    if (!Object.keys(rates).length) {
      arr(S.cache).forEach(function (r) {
        r = obj(r);
        var k = str(r.cache), c = rates[k] || (rates[k] = { hits: 0, misses: 0 });
        if (r.result === "hit") c.hits += num(r.count); else if (r.result === "miss") c.misses += num(r.count);
      });
    }
    return rates;
  }

  function cacheTiles(P, cards) {
    var S = P.S, num = P.num, obj = P.obj, card = P.card, pct = P.pct, count = P.count, fmtS = P.fmtS;
    var rates = cacheRates(P), names = Object.keys(rates).filter(function (k) { return rates[k].hits + rates[k].misses > 0; });
    if (!names.length) {
      card(cards, "none", "cache lookups (inductor's and AOTAutograd's caches were not asked)", false, "cache");
      return;
    }
    names.sort().forEach(function (k) {
      var r = rates[k], n = r.hits + r.misses;
      card(cards, pct(r.hits, n), k + " cache hit rate (" + r.hits + " of " + count(n, "lookup") + ")", false, "cache");
    });
    var c = obj(S.caches);
    if (c.miss_cost_s !== undefined) card(cards, fmtS(c.miss_cost_s), "cold work: compiles a warm cache would skip", false, "cache");
    if (num(c.saved_s) > 0) card(cards, fmtS(c.saved_s), "saved by cache hits (torch's record)", false, "cache");
  }

  function drawColdWarm(P) {
    var S = P.S, num = P.num, arr = P.arr, obj = P.obj, str = P.str, el = P.el, fix3 = P.fix3;
    var pct = P.pct, table = P.table, countsOf = P.countsOf, section = P.section;
    var c = obj(S.caches);
    var rates = obj(c.hit_rate), causes = countsOf(c.misses_by_cause), byp = arr(c.bypasses);
    if (!Object.keys(rates).length && !causes.length && !byp.length) return;
    var s = section("Cold and warm starts",
      "cold work (the compiles of the lookups that missed) " + fix3(c.miss_cost_s) + " s; loading from caches " +
      fix3(c.load_s) + " s; saved by hits " + fix3(c.saved_s) + " s (torch's remote_cache_time_saved_s).");
    s.appendChild(table(Object.keys(rates).map(function (k) { return { cache: k, r: obj(rates[k]) }; }), [
      ["cache", function (r) { return r.cache; }],
      ["hits", function (r) { return num(r.r.hits); }, true],
      ["misses", function (r) { return num(r.r.misses); }, true],
      ["hit rate", function (r) { return pct(r.r.hits, num(r.r.hits) + num(r.r.misses)); }, true,
        function (r) { return num(r.r.rate); }]
    ]));
    if (causes.length) {
      s.appendChild(el("h3", null, "Why lookups missed"));
      s.appendChild(table(arr(c.top_reasons), [
        ["cache", function (r) { return str(r.cache); }, false, null, "nw"],
        ["reason", function (r) { return str(r.reason); }],
        ["count", function (r) { return num(r.count); }, true]
      ]));
    }
    if (byp.length) {
      // a bypass compiles afresh on every run: torch's reason, in its words, is what to change
      s.appendChild(el("h3", null, "Bypassed: compiled afresh on every run" +
        (num(c.bypass_cost_s) > 0 ? " (" + fix3(c.bypass_cost_s) + " s here)" : "")));
      s.appendChild(table(byp, [
        ["cache", function (r) { return str(r.cache); }, false, null, "nw"],
        ["torch's reason", function (r) { return str(r.reason); }],
        ["count", function (r) { return num(r.count); }, true]
      ], function () { return "err"; }));
    }
    var odd = arr(c.odd_ranks);
    if (odd.length) {
      s.appendChild(el("h3", null, "Ranks that missed what the others hit"));
      s.appendChild(table(odd, [
        ["rank", function (r) { return num(r.rank); }, true],
        ["cache", function (r) { return str(r.cache); }, false, null, "nw"],
        ["graph", function (r) { return str(r.graph); }, false, null, "nw"],
        ["hit on ranks", function (r) { return arr(r.hit_on).join(", "); }],
        ["why", function (r) { return str(r.reason); }]
      ], function () { return "err"; }));
    }
  }

  function drawCacheDiff(P) {
    var D = P.D, num = P.num, arr = P.arr, obj = P.obj, str = P.str, el = P.el;
    var table = P.table, rate = P.rate, none = P.none, section = P.section;
    var c = obj(D.cache), rates = obj(c.hit_rate);
    var names = Object.keys(rates);
    var s = section("Caches", "misses " + num(obj(c.misses).base) + " \u2192 " + num(obj(c.misses)["new"]) + ".");
    if (!names.length) return none(s, "no lookups on either side");
    s.appendChild(table(names.map(function (k) { return { name: k, r: obj(rates[k]) }; }), [
      ["cache", function (x) { return x.name; }],
      ["base hit rate", function (x) { return x.r.base === null && num(x.r.base_bypasses) ? "bypassed" : rate(x.r.base); }, true],
      ["new hit rate", function (x) { return x.r["new"] === null && num(x.r.new_bypasses) ? "bypassed" : rate(x.r["new"]); }, true],
      ["base lookups", function (x) { return num(x.r.base_lookups); }, true],
      ["new lookups", function (x) { return num(x.r.new_lookups); }, true]
    ]));
    var byp = arr(c.new_bypasses);
    if (byp.length) {
      s.appendChild(el("h3", null, "New bypasses: compiled afresh on every run"));
      s.appendChild(table(byp, [
        ["cache", function (x) { return str(x.cache); }],
        ["base", function (x) { return num(x.base); }, true],
        ["new", function (x) { return num(x["new"]); }, true],
        ["torch's reason", function (x) { return str(x.reason); }]
      ], function () { return "err"; }));
    }
    var miss = arr(c.new_misses);
    if (miss.length) {
      s.appendChild(el("h3", null, "New misses, and why"));
      s.appendChild(table(miss, [
        ["cache", function (x) { return str(x.cache); }],
        ["cause", function (x) { return str(x.cause); }],
        ["base", function (x) { return num(x.base); }, true],
        ["new", function (x) { return num(x["new"]); }, true],
        ["why", function (x) { return arr(x.reasons).join("; "); }]
      ], function () { return "err"; }));
    }
  }

  window.TorchOtelPage.part({
    summary: { tiles: cacheTiles, sections: [["cold and warm starts", drawColdWarm, "recompiles"]] },
    diff: { sections: [["caches", drawCacheDiff, "recompiling frames"]] }
  });
})();
