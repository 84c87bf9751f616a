// The widget calls' part of the run summary's page (tests/fast/widget_calls): a section after the page's own.
window.TorchOtelPage.part({
  summary: { sections: [["widget calls", function (P) {
    P.section("Widgets made", P.num(P.obj(P.S.widget_calls).made) + " widgets made.");
  }]] }
});
