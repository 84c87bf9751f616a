"""A compiled module is named as the user wrote it, live and on replay, on every release of the matrix (issue 49).

tests/workloads/modules.py compiles two modules of the user's own classes (``MyModel``, ``Encoder``), an
``nn.Sequential`` and ``MyStack`` (a subclass that keeps torch's ``forward``), and a function. torch compiles the
user's classes' ``forward`` (both code objects named ``forward``) and the two others through a wrapper of its own
(``inner`` in torch's ``_dynamo/external_utils.py`` on 2.10 to 2.15, one frame to torch for both). Each is checked
on the spans (``code.*``, ``torch.compile.code.*``, ``torch.compile.frame.class``), the run summary, its page,
``torch-otel diff``, replay of the run's ``TORCH_TRACE`` log, and against tlparse.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WORKLOADS, read_otlp_json_spans, run_cli, run_python, spans_to_file, tlparse_compile_ids
from torch_otel._parse.records import guard_classes

pytestmark = pytest.mark.release  # run on every torch release in the matrix (noxfile.py)

SCRIPT = WORKLOADS / "modules.py"
NAMES = ("MyModel.forward", "Encoder.forward", "Sequential", "MyStack", "step")
WRAPPED = {"Sequential": "torch.nn.modules.container.Sequential", "MyStack": "__main__.MyStack"}
OWN = {"MyModel.forward": "__main__.MyModel", "Encoder.forward": "__main__.Encoder"}


def _line(pattern: str) -> int:
    """The line of modules.py that matches ``pattern``."""
    lines = SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if re.search(pattern, text))


def _expected_code() -> dict[str, tuple[str, int]]:
    """Each frame's ``code.file.path`` and ``code.line.number``: a method's and a function's ``def``; a module compiled
    through torch's wrapper, the user's line that called it."""
    return {
        "MyModel.forward": (str(SCRIPT), _def_line("MyModel")),
        "Encoder.forward": (str(SCRIPT), _def_line("Encoder")),
        "Sequential": (str(SCRIPT), _line(r"# call: Sequential$")),
        "MyStack": (str(SCRIPT), _line(r"# call: MyStack$")),
        "step": (str(SCRIPT), _line(r"^def step\(")),
    }


def _def_line(cls: str) -> int:
    """The line of ``def forward`` in class ``cls`` of modules.py."""
    lines = SCRIPT.read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if text.startswith(f"class {cls}("))
    return next(i for i in range(start, len(lines)) if lines[i].strip().startswith("def forward(")) + 1


def _roots(spans: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The compile roots, by (kind, compile id)."""
    return {
        (s["attrs"]["torch.compile.kind"], s["attrs"]["torch.compile.id"]): s["attrs"]
        for s in spans
        if "torch.compile.kind" in s["attrs"] and not s.get("parentSpanId")
    }


def _named(attrs: dict[str, Any]) -> tuple[Any, ...]:
    """What a root says of its frame: its name, file, line; torch's code; the class that names it (OTLP-JSON gives
    its integers as text)."""
    keys = ("code.function.name", "code.file.path", "code.line.number")
    torch_keys = ("torch.compile.code.function.name", "torch.compile.code.file.path", "torch.compile.code.line.number")
    out = [attrs.get(k) for k in (*keys, *torch_keys)] + [attrs.get("torch.compile.frame.class")]
    return tuple(
        int(v) if k.endswith("line.number") and v is not None else v for k, v in zip((*keys, *torch_keys, ""), out, strict=True)
    )


def _metrics_of(log: Path) -> dict[str, dict[str, Any]]:
    """Each frame compile's CompilationMetrics in the log, by compile id: torch's own code names."""
    out = {}
    for line in log.read_text().splitlines():
        if '{"compilation_metrics":' in line:
            m = json.loads(line[line.index("{") :])["compilation_metrics"]
            out[m["compile_id"]] = m
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("names")
    live = run_python(
        SCRIPT,
        {
            "TORCH_TRACE": str(tmp / "trace"),
            "TORCH_OTEL_SUMMARY": f"{tmp}/live.json,{tmp}/live.html",
            **spans_to_file(tmp / "live.jsonl"),
        },
        cwd=tmp,
    )
    assert live.returncode == 0 and "done" in live.stdout, live.stderr[-3000:]
    (log,) = (tmp / "trace").glob("*.log")
    rep = run_cli("replay", str(log), "-o", str(tmp / "r.jsonl"), "--json", str(tmp / "r.json"), "--html", str(tmp / "r.html"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    return {
        "tmp": tmp,
        "log": log,
        "live": _roots(read_otlp_json_spans(tmp / "live.jsonl")),
        "replay": _roots(read_otlp_json_spans(tmp / "r.jsonl")),
        "live_summary": json.loads((tmp / "live.json").read_text()),
        "replay_summary": json.loads((tmp / "r.json").read_text()),
        "replay_text": rep.stdout,
        "metrics": _metrics_of(log),
    }


def test_each_compiled_module_is_named_by_its_class_live_and_on_replay(run: dict[str, Any]) -> None:
    """``code.*`` names the frame as the user wrote it, ``torch.compile.code.*`` keeps torch's code object, and
    ``torch.compile.frame.class`` the class: live and replayed spans say the same of every compile."""
    frames = {cid: a for (kind, cid), a in run["live"].items() if kind == "frame"}
    assert sorted(a["code.function.name"] for a in frames.values()) == sorted(NAMES), frames
    expected = _expected_code()
    by_name = {a["code.function.name"]: (cid, a) for cid, a in frames.items()}
    for name, (cid, a) in by_name.items():
        assert _named(a)[1:3] == expected[name], (name, a)
        m = run["metrics"][cid]  # torch's own record of the code it compiled
        torch_code = (m["co_name"], m["co_filename"], m["co_firstlineno"])
        if name in WRAPPED:  # torch's wrapper, in torch's own files; the module's class names the frame
            assert "torch" in Path(m["co_filename"]).parts and m["co_name"] != name, m
            assert _named(a)[3:] == (*torch_code, WRAPPED[name]), (name, a)
        elif name in OWN:  # the user's forward, named by its object's class
            assert torch_code == ("forward", str(SCRIPT), expected[name][1]), m
            assert _named(a)[3:] == (*torch_code, OWN[name]), (name, a)
        else:  # a function is its code object: nothing else to keep
            assert torch_code == (name, *expected[name]) and _named(a)[3:] == (None, None, None, None), a
    # the two wrapped modules are one frame to torch (compile ids N/0 and N/1), two frames by name
    assert by_name["Sequential"][0].split("/")[0] == by_name["MyStack"][0].split("/")[0]
    # a lazy backward is named as its forward
    backward = [a for (kind, _), a in run["live"].items() if kind == "backward"]
    assert [_named(a) for a in backward] == [_named(by_name["MyModel.forward"][1])], backward
    # replay of the run's log names every compile alike (the class from the guards torch logged)
    assert {k: _named(a) for k, a in run["replay"].items()} == {k: _named(a) for k, a in run["live"].items()}


def test_two_models_of_two_classes_are_two_frames_in_the_summary_its_page_and_diff(run: dict[str, Any]) -> None:
    expected = _expected_code()
    for summary in (run["live_summary"], run["replay_summary"]):
        rows = {(f["function"], f["file"], f["line"]) for f in summary["frames"]}
        assert rows == {(name, *expected[name]) for name in NAMES}, summary["frames"]
    for name in NAMES:  # the summary's text: "MyModel.forward (modules.py:24)"
        assert f"  {name} (modules.py:{expected[name][1]})" in run["replay_text"], run["replay_text"]
    for page in ("live.html", "r.html"):
        text = html.unescape((run["tmp"] / page).read_text())
        assert all(f'"function": "{name}"' in text or f'"function":"{name}"' in text for name in NAMES), page
    # diff, each side from another form of the run: every frame matched by its name, none new or gone
    tmp = run["tmp"]
    res = run_cli("diff", str(tmp / "live.json"), str(tmp / "live.jsonl"), "--json", str(tmp / "d.json"))
    assert res.returncode == 0, res.stderr[-3000:]
    diff = json.loads((tmp / "d.json").read_text())
    assert {(f["function"], f["status"]) for f in diff["frames"]} == {(name, "both") for name in NAMES}, diff["frames"]


def test_tlparse_files_both_wrapped_modules_under_torchs_wrapper_and_their_guards_name_the_classes(
    run: dict[str, Any],
) -> None:
    """tlparse, the reference reader, lists the compiles of the Sequential and of MyStack under one frame: torch's
    wrapper, by its code object (``external_utils.py:<line> in inner``). tlparse is right about the code torch
    compiled, which torch-otel keeps on ``torch.compile.code.*``; torch-otel is right about what the user compiled:
    the guards torch logged for those compiles (tlparse's own ``dynamo_cpp_guards_str`` artifacts) name two classes,
    the ones torch-otel names the frames by."""
    out = run["tmp"] / "tlparse"
    assert tlparse_compile_ids(run["log"], out) >= {"0/0"}
    page = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", (out / "index.html").read_text())))
    frames = {a["code.function.name"]: (cid, a) for (kind, cid), a in run["live"].items() if kind == "frame"}
    for name, cls in WRAPPED.items():
        cid, a = frames[name]
        where = f"{a['torch.compile.code.file.path']}:{a['torch.compile.code.line.number']} in {a['torch.compile.code.function.name']}"
        listed = [m.group(1) for m in re.finditer(r"((?:\[[\d/]+\] )+)" + re.escape(where), page)]
        assert any(f"[{cid}]" in ids for ids in listed), (where, listed, page[:3000])
        (guards,) = [p for p in out.glob(f"-_{cid.replace('/', '_')}_0/dynamo_cpp_guards_str_*.txt")]
        assert guard_classes(guards.read_text().splitlines()).get("fn") == cls, guards.read_text()[:2000]
    # one frame to tlparse, two to the user: both compile ids on the one line of torch's wrapper
    assert frames["Sequential"][1]["torch.compile.code.file.path"] == frames["MyStack"][1]["torch.compile.code.file.path"]
