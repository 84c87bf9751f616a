(function () {
  function note(msg) {
    var b = document.body, prev = b.dataset.errors;
    b.dataset.errors = (prev ? prev + "\n" : "") + msg;
  }
  window.__noteError = note;
  window.addEventListener("error", function (e) {
    note(String(e.message || "error") + (e.lineno ? " (line " + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) { note("unhandled rejection: " + String(e.reason)); });
})();
