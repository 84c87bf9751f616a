"""Fast tier: the start-up's pure parts and its recorder without torch.

- the attribution: the innermost interval wins, ``compile``, ``distributed_init`` and ``bridge`` claim all of theirs,
  everything is clipped to the start-up, and the phases and the rest add up to the whole to the nanosecond (also
  for random intervals); compiles on the wall clock placed by the clock pairs, drift included;
- the lead line, a start-up past an hour, the merge of ranks naming the holder and why, the comparison and its gate,
  the JSON contract read back, a bad ``TORCH_OTEL_STARTUP_END``, the process's start from ``/proc`` and without it;
- the recorder in a plain Python process (no torch): an import timed against the script's own stamps, a failed
  import's traceback exactly Python's, a hooked function's signature kept and its code back after the end,
  ``ready()``, the exit end, a forked child that reports nothing, the bound on intervals.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_otel._features.startup import process, targets
from torch_otel._features.startup import recorder as startup_hooks
from torch_otel._features.startup.attribution import PHASES, CacheShare, CompileSpan, Startup, Timeline, attribute, build
from torch_otel._features.startup.text import compare, compare_lines, duration_text, gate, lead_line, merge_ranks

S = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def _own(intervals: list[tuple[int, int, str, str]], start: int = 0, end: int = 100) -> list[int]:
    return attribute(start, end, intervals)


def test_the_innermost_interval_wins_and_an_import_inside_a_weight_load_is_imports() -> None:
    own = _own([(10, 60, "weights", "from_pretrained"), (20, 30, "imports", "transformers"), (25, 28, "imports", "torch")])
    assert own == [40, 7, 3]


def test_compile_claims_all_of_its_interval_even_an_import_inside_it() -> None:
    own = _own([(0, 100, "first_step", "forward"), (10, 50, "compile", "0/0"), (20, 30, "imports", "torch._inductor")])
    assert own == [60, 40, 0]


def test_the_outermost_of_nested_opaque_intervals_claims_them_and_partial_overlaps_split_by_start() -> None:
    assert _own([(10, 50, "distributed_init", "init"), (20, 30, "waiting_for_ranks", "barrier")]) == [40, 0]
    assert _own([(10, 50, "compile", "0/0"), (20, 30, "bridge", "arm")]) == [40, 0]
    assert _own([(10, 50, "cudagraph_capture", "torch.cuda.graph"), (20, 30, "first_step", "forward")]) == [40, 0]
    assert _own([(10, 50, "data", "next"), (40, 70, "imports", "x")]) == [30, 30]  # the later start wins its part


def test_intervals_are_clipped_to_the_start_up_and_the_rest_is_what_none_covers() -> None:
    tl = Timeline(
        100, 200, "step", 0, "proc", [(50, 150, "imports", "torch"), (190, 300, "data", "next"), (300, 400, "weights", "x")]
    )
    st_ = build(tl)
    assert st_.phases["imports"] == 50 / S and st_.phases["data"] == 10 / S and st_.phases["weights"] == 0
    assert st_.unattributed_s == 40 / S and st_.first_step_s == 100 / S


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 5_000), st.sampled_from(PHASES), st.sampled_from(["a", "b"])),
        max_size=40,
    ),
    st.integers(0, 10_000),
)
def test_the_phases_and_the_rest_add_up_to_the_whole_to_the_nanosecond(raw: list[tuple[int, int, str, str]], end: int) -> None:
    intervals = [(s, s + d, p, lab) for s, d, p, lab in raw]
    own = attribute(0, end, intervals)
    covered = set()
    for s, e, _, _ in intervals:
        covered.update(range(max(0, s), min(e, end)))
    assert sum(own) == len(covered)  # each covered nanosecond once, the rest uncovered
    st_ = build(Timeline(0, end, "step", 0, "proc", intervals))
    assert round(sum(st_.phases.values()) * S) + round(st_.unattributed_s * S) == end


def test_a_compile_on_the_wall_clock_is_placed_by_the_clock_pairs_drift_included() -> None:
    # the recorder's clock ran 1 ms slow per second against the wall clock: two pairs 100 s apart say so
    pairs = [(1_000 * S, 5_000 * S), (1_100 * S, 5_100 * S + 100_000_000)]
    tl = Timeline(
        990 * S,
        1_100 * S,
        "step",
        4_990 * S,
        "proc",
        [],
        [CompileSpan(5_050 * S + 50_000_000, 5_060 * S + 60_000_000, "0/0")],
        pairs,
    )
    st_ = build(tl)
    assert st_.phases["compile"] == pytest.approx(10.0, abs=1e-6)
    (span,) = st_.spans
    assert span.start_s == pytest.approx(60.0, abs=1e-6)  # at 1050 s on the recorder's clock, 60 s after the start


def test_the_lead_line_of_the_issue() -> None:
    st_ = Startup(
        184.0,
        "step",
        {
            **dict.fromkeys(PHASES, 0.0),
            "compile": 112.24,
            "weights": 33.12,
            "imports": 16.56,
            "distributed_init": 7.36,
            "first_step": 5.52,
        },
        9.2,
        cache=CacheShare(compiles=12, hits=9, saved_s=40.2),
    )
    assert lead_line(st_) == (
        "first step after 184 s: compile 61% (cache hits saved 40.2 s), weights 18%, imports 9%, distributed init 4%, "
        "first step 3%, unattributed 5%"
    )


def test_each_end_has_its_head_and_a_start_up_past_an_hour_reads_in_hours() -> None:
    base = dict.fromkeys(PHASES, 0.0)
    assert (
        lead_line(Startup(2.5, "forward", {**base, "imports": 2.0}, 0.5))
        == "first forward after 2.5 s: imports 80%, unattributed 20%"
    )
    assert lead_line(Startup(0.4, "ready", base, 0.4)).startswith("ready after 0.40 s: ")
    assert (
        lead_line(Startup(3.0, "exit", {**base, "imports": 2.999}, 0.001))
        == "exit (no first step) after 3.0 s: imports 100%, unattributed <1%"
    )
    long = Startup(7530.0, "step", {**base, "compile": 6000.0, "weights": 1500.0}, 30.0)
    assert duration_text(3840) == "1 h 04 min"
    assert lead_line(long) == "first step after 2 h 06 min: compile 80%, weights 20%, unattributed <1%"
    assert lead_line(Startup(0.0, "exit", base, 0.0)) == "exit (no first step) after 0.00 s"


def _rank(weights: float, wait: float, started: float = 1000.0, op: str = "all_reduce", rank: int = 0) -> Startup:
    phases = {**dict.fromkeys(PHASES, 0.0), "imports": 10.0, "weights": weights, "waiting_for_ranks": wait, "first_step": 1.0}
    total = sum(phases.values()) + 0.5
    return Startup(total, "step", phases, 0.5, started_unix_s=started, waits={op: wait} if wait else {}, rank=rank)


def test_the_merge_names_the_late_rank_its_phase_and_the_ranks_that_waited() -> None:
    job = merge_ranks({0: _rank(2.0, 3.0), 1: _rank(2.1, 2.9), 2: _rank(5.1, 0.01)})
    assert job.holder == 2
    assert job.why == "rank 2 loaded weights 3.0 s longer; ranks 0 and 1 waited 3.0 s in the first all-reduce"
    ddp = merge_ranks({0: _rank(2.0, 3.0, op="_verify_params_across_processes"), 1: _rank(5.0, 0.0)})
    assert ddp.why == "rank 1 loaded weights 3.0 s longer; rank 0 waited 3.0 s in DDP's parameter check"


def test_a_rank_late_to_init_process_group_holds_the_first_step_and_the_others_waited_in_it() -> None:
    """init_process_group is a rendezvous: the ranks that came first spend the late one's delay inside it (as
    ``distributed_init``), and DDP's first backward ends every rank's first step together. The late rank is the one
    that spent least there, whichever it is (the merge named the last rank before, whichever was late)."""

    def rank(r: int, late: bool) -> Startup:
        phases = {**dict.fromkeys(PHASES, 0.0), "imports": 3.0, "distributed_init": 0.05 if late else 6.05}
        phases.update(waiting_for_ranks=0.01, compile=2.0, first_step=0.5)
        rest = 6.1 if late else 0.1  # the late rank's own delay before init_process_group: plain code
        return Startup(sum(phases.values()) + rest, "step", phases, rest, started_unix_s=1000.0, rank=r)

    for late in range(3):
        job = merge_ranks({r: rank(r, r == late) for r in range(3)})
        waiters = " and ".join(str(r) for r in range(3) if r != late)
        assert job.holder == late, job
        assert (
            job.why == f"rank {late} spent 6.0 s longer in unattributed code; ranks {waiters} waited 6.0 s in init_process_group"
        )


def test_with_no_wait_the_slowest_rank_holds_the_first_step_and_a_late_start_is_a_reason() -> None:
    job = merge_ranks({0: _rank(2.0, 0.0), 1: _rank(2.0, 0.0, started=1004.0)})
    assert job.holder == 1 and job.why == "rank 1 started 4.0 s after the others"
    assert job.first_step_s == pytest.approx(4.0 + job.ranks[1].first_step_s)
    many = merge_ranks({r: _rank(2.0, 3.0) for r in range(8)} | {8: _rank(5.0, 0.0)})
    assert many.why.endswith("; ranks 0, 1, 2, 3, 4 and 3 more waited 3.0 s in the first all-reduce")
    assert merge_ranks({3: _rank(2.0, 0.0)}).holder == 3 and merge_ranks({}).holder is None


def test_two_start_ups_compared_phase_by_phase_and_the_gate_on_the_time_to_the_first_step() -> None:
    base = dict.fromkeys(PHASES, 0.0)
    cold = Startup(90.0, "step", {**base, "compile": 74.0, "imports": 15.0}, 1.0)
    warm = Startup(28.0, "step", {**base, "compile": 11.5, "imports": 15.5}, 1.0, cache=CacheShare(3, 3, 0, 68.9))
    rows = {r.name: r for r in compare(cold, warm)}
    assert rows["first_step_total"].delta_s == -62.0 and rows["compile"].delta_s == -62.5 and rows["cache_saved"].after_s == 68.9
    assert compare_lines(cold, warm) == [
        "time to first step: 90.0 s -> 28.0 s (-62.0 s, -69%)",
        "  compile                  74.00 s ->     11.50 s  (-62.50 s, -84%)",
        "  imports                  15.00 s ->     15.50 s  (+0.50 s, +3%)",
        "  compile cache: 0 -> 3 hits, saved 0.00 s -> 68.9 s",
    ]
    assert gate(cold, warm, max_increase_s=1.0) is None
    assert (
        gate(warm, cold, max_increase_s=10.0) == "time to first step grew 62.0 s (28.0 s -> 90.0 s), more than the 10.0 s allowed"
    )
    assert gate(warm, cold, max_increase_pct=50) == "time to first step grew 221% (28.0 s -> 90.0 s), more than the 50% allowed"
    other = Startup(28.0, "exit", warm.phases, 1.0)
    assert "  the start-ups ended differently: step -> exit" in compare_lines(warm, other)


def test_the_json_contract_and_back() -> None:
    tl = Timeline(
        0,
        10 * S,
        "step",
        1_700_000_000 * S,
        "proc",
        [(0, 2 * S, "interpreter", "run"), (2 * S, 7 * S, "imports", "torch")],
        second_step_ns=S // 2,
        rank=3,
    )
    st_ = build(tl)
    d = json.loads(json.dumps(st_.to_dict()))
    assert {"first_step_s", "end", "phases", "unattributed_s"} <= set(d)
    assert set(d["phases"]) == set(PHASES)
    assert d["first_step_s"] == 10.0 and d["end"] == "step" and d["unattributed_s"] == 3.0 and d["second_step_s"] == 0.5
    back = Startup.from_dict(d)
    assert back.to_dict() == d and back.rank == 3 and back.imports == {"torch": 5.0}


def test_the_end_setting_names_a_bad_value_and_the_valid_ones() -> None:
    assert startup_hooks.end_mode(None) == ("auto", None)
    assert startup_hooks.end_mode(" Step ") == ("step", None)
    mode, line = startup_hooks.end_mode("first-token")
    assert mode == "auto"
    assert (
        line == "TORCH_OTEL_STARTUP_END='first-token' is not one of auto, step, forward, ready: the start-up ends as 'auto' says"
    )


def test_the_process_start_from_proc_and_without_it(tmp_path: Path) -> None:
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])  # noqa: SIM115
    fake = tmp_path / "stat"
    fake.write_text(f"42 (a (strange) name) S {' '.join(['0'] * 18)} {ticks} 0 0\n")
    start, unix, source = startup_hooks.process_start(str(fake))
    assert source == "proc"
    real = startup_hooks.process_start()
    assert abs(start - real[0]) < 20_000_000 and abs(unix - real[1]) < 20_000_000  # the same start, to a tick or two
    assert startup_hooks.process_start(str(tmp_path / "missing"))[2] in ("bridge", "psutil")


# -- the recorder in a plain Python process --------------------------------------------------------------------------


def _python(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "slowmod.py").write_text("import time\ntime.sleep(0.2)\n")
    (tmp_path / "badmod.py").write_text("x = 1 / 0\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OTEL_")}
    full.update(env or {}, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


RECORDER = """
import json, sys, time
from torch_otel._features.startup import recorder as sh
r = sh.install(activation="run")
"""


def test_an_import_is_timed_against_the_scripts_own_stamps(tmp_path: Path) -> None:
    res = _python(
        RECORDER
        + """
t0 = time.perf_counter_ns(); import slowmod; t1 = time.perf_counter_ns()
sh.ready()
st = r.startup()
print(json.dumps({"stamp": (t1 - t0) / 1e9, "imports": st.imports, "end": st.end, "state": r.state,
                  "hooked": "startup" in repr(sys.modules["_frozen_importlib"]._find_and_load.__globals__.get("_enter"))}))
""",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["end"] == "ready" and out["state"] == "done" and not out["hooked"]
    assert abs(out["imports"]["slowmod"] - out["stamp"]) <= 0.05


def test_a_failed_import_prints_exactly_pythons_traceback(tmp_path: Path) -> None:
    code = "{}\nimport badmod\n"
    off = _python(code.format("import sys"), tmp_path)
    on = _python(code.format(RECORDER), tmp_path)
    assert off.returncode == on.returncode == 1
    import re

    def same(text: str) -> str:  # the script's own line number differs: its first lines differ
        return re.sub(r'File "<string>", line \d+', 'File "<string>", line N', text)

    assert same(on.stderr) == same(off.stderr)
    assert "badmod.py" in on.stderr and "ZeroDivisionError" in on.stderr


def test_a_hooked_function_keeps_its_identity_and_signature_and_gets_its_code_back(tmp_path: Path) -> None:
    res = _python(
        RECORDER
        + """
import functools, inspect
def deco(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper
def plain(a, b=2, /, c=3, *rest, d, e=5, **kw):
    time.sleep(0.05)
    return (a, b, c, rest, d, e, kw)
wrapped = deco(plain)
held = plain
sig, code = str(inspect.signature(plain)), plain.__code__
r.swap(plain, "weights", "plain")
r.swap(wrapped, "data", "wrapped")
out = {"same_sig": str(inspect.signature(plain)) == sig, "swapped": plain.__code__ is not code,
       "call": held(1, c=4, d=6, z=7) == (1, 2, 4, (), 6, 5, {"z": 7}), "wrapped": wrapped(1, 2, 3, 9, d=4)[3] == (9,)}
r.finish()
st = r.startup()
out.update(back=plain.__code__ is code, weights=st.phases["weights"], data=st.phases["data"], end=st.end)
print(json.dumps(out))
""",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["same_sig"] and out["swapped"] and out["call"] and out["wrapped"] and out["back"]
    assert out["end"] == "exit"
    assert out["weights"] >= 0.09  # both calls of plain; the one inside wrapped is its innermost interval
    assert out["data"] < 0.01


def test_the_start_up_ends_at_exit_and_a_forked_child_reports_nothing(tmp_path: Path) -> None:
    res = _python(
        RECORDER
        + """
import atexit, os
pid = os.fork()
if pid == 0:
    print(json.dumps({"child": r.state}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
t_end = time.perf_counter_ns()
atexit.register(lambda: print(json.dumps({"end": r.end_name, "late_ms": (r.end_ns - t_end) / 1e6, "state": r.state})))
""",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    child, parent = (json.loads(ln) for ln in res.stdout.splitlines())
    assert child == {"child": "forked"}
    assert parent["end"] == "exit" and parent["state"] == "done" and 0 <= parent["late_ms"] < 50


def test_a_start_up_ended_by_its_one_step_is_done_at_exit_without_a_second(tmp_path: Path) -> None:
    """A program that steps once (a benchmark, a one-batch smoke test) and exits: the start-up it ended waits for a
    second step that never comes; at exit it is done, and its result is there to publish."""
    res = _python(
        RECORDER
        + """
import atexit
t = sh._clock()
r.end("step", t)
waiting = r.state
atexit.register(lambda: print(json.dumps({"waiting": waiting, "state": r.state, "end": r.startup().end,
                                          "second": r.second_ns})))
""",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"waiting": "second", "state": "done", "end": "step", "second": None}


def test_past_its_bound_the_recorder_counts_intervals_instead_of_keeping_them(tmp_path: Path) -> None:
    res = _python(
        RECORDER
        + """
for i in range(sh.MAX_INTERVALS + 10):
    r.add(i, i + 1, "data", "next")
st = r.startup()
print(json.dumps({"n": len(r.intervals), "notes": st.notes}))
""",
        tmp_path,
    )
    out = json.loads(res.stdout)
    assert out["n"] == startup_hooks.MAX_INTERVALS
    assert any("were not kept: their time is unattributed" in n for n in out["notes"])


def test_off_installs_nothing(tmp_path: Path) -> None:
    res = _python(
        RECORDER + "print(r is None, sys.modules['_frozen_importlib']._find_and_load.__code__.co_name)",
        tmp_path,
        {"TORCH_OTEL_STARTUP": "off"},
    )
    assert res.stdout.split() == ["True", "_find_and_load"]


def test_the_recorders_phases_are_the_contracts() -> None:
    """Every phase the hooks time is one of the contract's names."""
    named = {row[1] for rows in targets.SWAPS.values() for row in rows}
    src = inspect.getsource(targets)
    import re

    pushed = set(
        re.findall(
            r'"(interpreter|bridge|imports|distributed_init|weights|data|compile|cuda_init|cudagraph_capture|waiting_for_ranks|first_step)"',
            src,
        )
    )
    assert named <= set(PHASES) and pushed <= set(PHASES) and {"first_step", "weights", "data", "waiting_for_ranks"} <= named


def test_under_import_torch_otel_auto_the_interpreter_phase_is_everything_before_it_and_says_so(tmp_path: Path) -> None:
    res = _python(
        """
import json, time
import numpy  # the user's imports before the bridge's
time.sleep(0.2)
from torch_otel._features.startup import recorder as sh
r = sh.install(activation="auto")
sh.ready()
st = r.startup()
from torch_otel._features.startup.text import lead_line
print(json.dumps({"interpreter": st.interpreter, "notes": st.notes, "before": st.phases["interpreter"], "lead": lead_line(st)}))
""",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["interpreter"] == "before import torch_otel.auto" and out["before"] >= 0.2
    assert out["notes"] == ["imported before the bridge (in 'before import torch_otel.auto'): numpy"]
    assert out["lead"].startswith("ready after ") and "before import torch_otel.auto " in out["lead"]


def test_each_bad_start_up_setting_is_one_line_and_off_installs_nothing(tmp_path: Path) -> None:
    code = """
from torch_otel._features.startup import recorder as sh
r = sh.install(activation="run")
print("none" if r is None else r.mode)
"""
    bad = _python(code, tmp_path, {"TORCH_OTEL_STARTUP": "maybe", "TORCH_OTEL_STARTUP_END": "sometimes"})
    assert bad.returncode == 0 and bad.stdout.split() == ["auto"], bad.stderr
    lines = [ln for ln in bad.stderr.splitlines() if "TORCH_OTEL_STARTUP" in ln]
    assert lines == [
        "torch-otel: WARNING: TORCH_OTEL_STARTUP_END='sometimes' is not one of auto, step, forward, ready: the start-up "
        "ends as 'auto' says",
        "torch-otel: WARNING: TORCH_OTEL_STARTUP='maybe' is not on or off: the start-up is recorded (on)",
    ], bad.stderr
    off = _python(code, tmp_path, {"TORCH_OTEL_STARTUP": "off"})
    assert off.returncode == 0 and off.stdout.split() == ["none"] and off.stderr == "", off.stderr


def test_a_clock_pair_split_by_another_thread_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pairs place torch's wall-clock compile records on the recorder's clock. A read whose two clocks another
    thread's GIL turn split by 5 ms would shift every compile by it; the pair kept is the read whose own clock moved
    least around the wall clock's."""
    perf = iter([0, 5_000_000, 10_000_000, 10_000_400, 20_000_000, 20_000_900])  # a split read, then two close ones
    wall = iter([1_000_000_000, 1_000_000_000 + 10_000_200, 1_000_000_000 + 20_000_450])
    monkeypatch.setattr(process, "_clock", lambda: next(perf))
    monkeypatch.setattr(process.time, "time_ns", lambda: next(wall))
    assert process.clock_pair(tries=3) == (10_000_200, 1_000_000_000 + 10_000_200)  # the second read: 400 ns apart

    # why it matters: a 6 s compile placed by pairs 20 s apart, one of them split by 5 ms, reads 1.5 ms long or short
    def compile_s(pairs: tuple[tuple[int, int], ...]) -> float:
        span = CompileSpan(7 * 10**9, 13 * 10**9, "0/0")
        return build(Timeline(0, 20 * 10**9, "step", 0, "proc", (), (span,), pairs)).phases["compile"]

    assert compile_s(((0, 0), (20 * 10**9, 20 * 10**9))) == pytest.approx(6.0, abs=1e-9)
    assert compile_s(((0, 0), (20 * 10**9 + 5_000_000, 20 * 10**9))) == pytest.approx(6.0015, abs=1e-6)


def test_the_summarys_start_up_body_keeps_the_slowest_imports_within_the_width() -> None:
    """One line: the second step, the packages that took longest to import, the interpreter phase's name. Where they
    do not fit, the name gives way first, then the imports one package at a time, the slowest kept (all the imports
    gave way at the default width of 100 before, leaving the second step alone)."""
    from torch_otel._features.startup.parts import text_body

    s = {
        "first_step_s": 9.8,
        "end": "step",
        "phases": {"imports": 5.0, "compile": 3.0, "first_step": 1.8},
        "unattributed_s": 0.0,
        "second_step_s": 0.94,
        "interpreter": "before import torch_otel.auto",
        "imports": {"torch": 3.1, "transformers": 1.2, "torch._dynamo": 0.4, "numpy": 0.1, "json": 0.01},
    }
    (wide,) = text_body({"startup": s}, 400)
    assert wide == (
        "start-up (ended at step): second step 0.94 s; imports: torch 3.1 s, transformers 1.2 s, torch._dynamo 0.40 s, "
        "numpy 0.10 s; interpreter: 'before import torch_otel.auto'"
    )
    (default,) = text_body({"startup": s}, 100)
    assert len(default) <= 100 and default.startswith("start-up (ended at step): second step 0.94 s; imports: torch 3.1 s")
    (narrow,) = text_body({"startup": s}, 70)
    assert narrow == "start-up (ended at step): second step 0.94 s; imports: torch 3.1 s"
