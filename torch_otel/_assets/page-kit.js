// Helpers the run summary page (summary.js) and the diff page (diff.js) both draw with: values read defensively
// from the embedded JSON, elements built with textContent only. Inlined before either page's script.
window.TorchOtelPage = (function () {
  "use strict";
  var noteError = window.__noteError || function () {};

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
  function fix3(s) { return num(s).toFixed(3); }
  // "forward (model.py:32)"; a frame in an installed package with the user's line that called it:
  // "wrapper (generic.py:1030) from train.py:42", as the text summary names it
  function where(fn, file, line, site) {
    var f = str(fn) || "?";
    if (file === null || file === undefined || file === "") return f;
    var parts = str(file).split(/[\\/]/), base = parts.pop();
    var library = parts.indexOf("site-packages") >= 0 || parts.indexOf("dist-packages") >= 0;
    return f + " (" + base + ":" + (line === null || line === undefined ? "?" : line) + ")" +
      (library && site ? " from " + str(site) : "");
  }
  function guard(name, fn) {
    try { fn(); } catch (e) {
      noteError(name + ": " + (e && e.stack ? e.stack : String(e)));
      var t = document.getElementById("tables");
      if (t) t.appendChild(el("p", "fail", "could not draw " + name + ": " + String(e)));
    }
  }
  function link(url) {
    // a link to torch's documentation site only (over TLS); anything else stays text
    url = str(url);
    var parts = url.split("/");
    if (parts.length < 4 || parts[0] !== "https" + ":" || parts[1] !== "" || parts[2] !== "docs.pytorch.org") {
      return el("code", null, url);
    }
    var a = el("a", null, "torch's docs");
    a.href = url;
    a.rel = "noopener noreferrer";
    a.title = url;
    return a;
  }
  function none(s, text) { s.appendChild(el("p", "none", text)); }
  function card(box, value, label, bad, kind) {
    var c = el("div", "card" + (bad ? " bad" : "") + (kind ? " " + kind : ""));
    c.appendChild(el("b", null, value));
    c.appendChild(el("span", null, label));
    box.appendChild(c);
  }
  function section(title, note) {
    var s = el("section", "tbl");
    s.appendChild(el("h2", null, title));
    if (note) s.appendChild(el("p", "muted", note));
    document.getElementById("tables").appendChild(s);
    return s;
  }

  // Each feature's part of the pages (torch_otel._features: its PageView's script, inlined after this kit), registered
  // with part({summary: {tiles: function (P, cards), sections: [...]}, diff: {sections: [...]}}) before the page draws.
  // A section is [name, draw(P), the name of the page's own section it comes before (none: after the page's own)];
  // P holds the page's facts and what it draws with.
  var parts = [];
  function part(p) { parts.push(obj(p)); }
  function placed(own, page, P) {
    var out = own.slice();
    parts.forEach(function (p) {
      arr(obj(p[page]).sections).forEach(function (s) {
        var draw = function () { s[1](P); };
        var at = s[2] ? out.map(function (o) { return o[0]; }).indexOf(s[2]) : -1;
        if (at < 0) out.push([s[0], draw]); else out.splice(at, 0, [s[0], draw]);
      });
    });
    return out;
  }
  function tiles(page, P, cards) {
    parts.forEach(function (p) { var t = obj(p[page]).tiles; if (typeof t === "function") t(P, cards); });
  }

  return { num: num, arr: arr, obj: obj, str: str, el: el, fix3: fix3, where: where, guard: guard, link: link, none: none, card: card,
           section: section, part: part, placed: placed, tiles: tiles };
})();
