"""The Prometheus alert rules (grafana/alerts/): promtool checks them, and unit-tests each alert firing and not firing.

The promtool test file is built here from the scenarios below: the expected
annotations are the rules' own, with their template fields filled in, so the
runbook text lives in one place (the rules file).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.servers import require

RULES = Path(__file__).resolve().parent.parent / "grafana" / "alerts" / "torch-compile-rules.yml"


def _odd(job: str, aspect: str, rank: str) -> dict[str, str]:
    return {"job": job, "run_id": f"{job}-run", "aspect": aspect, "rank": rank, "instance": f"{job}-{rank}"}


def _fp(job: str, aspect: str, values: dict[str, str]) -> list[tuple[str, str]]:
    """Each rank's torch_compile_rank_fingerprint for one aspect, as Prometheus scrapes it from that rank's port."""
    out = []
    for rank, v in values.items():
        labels = ",".join(f'{k}="{x}"' for k, x in _odd(job, aspect, rank).items())
        out.append((f"torch_compile_rank_fingerprint{{{labels}}}", v))
    return out


# alert -> (input series, [(eval time, [(expected labels, value as the template shows it)])])
SCENARIOS: dict[str, tuple[list[tuple[str, str]], list[tuple[str, list[tuple[dict[str, str], str]]]]]] = {
    "TorchCompileRecompileLimitHit": (
        [
            ('torch_compile_recompile_limit_hits_total{job="train",rank="0"}', "0x5 1x10"),
            ('torch_compile_recompile_limit_hits_total{job="train",rank="1"}', "0x15"),
            # first scraped already at 1: no earlier sample for increase() to start from
            ('torch_compile_recompile_limit_hits_total{job="train",rank="2"}', "_x3 1x12"),
        ],
        [
            ("2m", []),
            ("8m", [({"job": "train", "rank": "0"}, "1"), ({"job": "train", "rank": "2"}, "1")]),
            ("16m", []),
        ],
    ),
    "TorchCompileRecompileStorm": (
        [
            ('torch_compile_recompiles_total{job="train",rank="0",reason="size_mismatch"}', "0+20x30"),
            ('torch_compile_recompiles_total{job="train",rank="1",reason="size_mismatch"}', "0+2x30"),
        ],
        [("3m", []), ("15m", [({"job": "train", "rank": "0"}, "20")])],
    ),
    "TorchCompileFailures": (
        [
            ('torch_compile_compiles_total{job="train",rank="0",kind="frame",status="failed"}', "0 0 1x10"),
            ('torch_compile_compiles_total{job="train",rank="1",kind="frame",status="failed"}', "0x12"),
            ('torch_compile_compiles_total{job="train",rank="1",kind="frame",status="ok"}', "0 0 5x10"),
            ('torch_compile_compiles_total{job="train",rank="2",kind="frame",status="failed"}', "_x3 2x10"),
        ],
        [("1m", []), ("5m", [({"job": "train", "rank": "0"}, "1"), ({"job": "train", "rank": "2"}, "2")]), ("14m", [])],
    ),
    "TorchCompileSlow": (
        [
            ('torch_compile_frame_duration_seconds_bucket{job="big",kind="frame",le="60"}', "0x60"),
            ('torch_compile_frame_duration_seconds_bucket{job="big",kind="frame",le="600"}', "0+1x60"),
            ('torch_compile_frame_duration_seconds_bucket{job="big",kind="frame",le="+Inf"}', "0+1x60"),
            ('torch_compile_frame_duration_seconds_bucket{job="small",kind="frame",le="10"}', "0+1x60"),
            ('torch_compile_frame_duration_seconds_bucket{job="small",kind="frame",le="600"}', "0+1x60"),
            ('torch_compile_frame_duration_seconds_bucket{job="small",kind="frame",le="+Inf"}', "0+1x60"),
        ],
        [("10m", []), ("40m", [({"job": "big"}, "9m 32s")])],
    ),
    "TorchStartupSlowRank": (
        [
            # job "train": rank 2 took 400 s to its first step, the others 100 s (median 100: 100 * 1.5 + 60 = 210)
            ('torch_startup_first_step_seconds{job="train",rank="0",end="step"}', "_x2 100x20"),
            ('torch_startup_first_step_seconds{job="train",rank="1",end="step"}', "_x2 100x20"),
            ('torch_startup_first_step_seconds{job="train",rank="2",end="step"}', "_x5 400x20"),
            # job "even": every rank alike, and one rank a little slower (130 s of a 210 s bound): no alert
            ('torch_startup_first_step_seconds{job="even",rank="0",end="step"}', "_x2 100x20"),
            ('torch_startup_first_step_seconds{job="even",rank="1",end="step"}', "_x2 130x20"),
            ('torch_startup_first_step_seconds{job="even",rank="2",end="step"}', "_x2 100x20"),
        ],
        [("3m", []), ("8m", [({"job": "train", "rank": "2"}, "6m 40s")])],
    ),
    "TorchCompileRankSkew": (
        [
            ('torch_compile_seconds_total{job="train",rank="0",kind="frame",status="ok"}', "0+10x30"),
            ('torch_compile_seconds_total{job="train",rank="1",kind="frame",status="ok"}', "0+10x30"),
            ('torch_compile_seconds_total{job="train",rank="2",kind="frame",status="ok"}', "0+30x30"),
            ('torch_compile_seconds_total{job="even",rank="0",kind="frame",status="ok"}', "0+10x30"),
            ('torch_compile_seconds_total{job="even",rank="1",kind="frame",status="ok"}', "0+11x30"),
        ],
        [("5m", []), ("25m", [({"job": "train"}, "8m 20s")])],
    ),
    "TorchCompileRankDivergence": (
        [
            # train: rank 1 alone compiles something at 55 s (a recompile the others never do)
            *_fp("train", "compiles", {"0": "7x40", "1": "7x10 9x30", "2": "7x40"}),
            # skew: all ranks compile the same things, 10 s apart: never odd for long enough
            *_fp("skew", "compiles", {"0": "1x10 2x30", "1": "1x12 2x28", "2": "1x14 2x26"}),
            # storm: one rank a compile behind the other all along, but compiling every 5 s: never settled
            *_fp("storm", "compiles", {"0": "0+1x40", "1": "_ 0+1x39"}),
            # cold: rank 1 missed the cache; it alone logged a collective schedule (the others' graphs came from the cache)
            *_fp("cold", "cache", {"0": "5x40", "1": "6x40", "2": "5x40"}),
            *_fp("cold", "collectives", {"0": "0x40", "1": "3x40", "2": "0x40"}),
            # its latest miss, as the bridge serves it: the cache aspect's alert names the graph, cause and part
            (
                'torch_compile_cache_last_miss{job="cold",instance="cold-1",rank="1",cache="fx_graph",graph="0/0 forward",'
                'cause="config",component="inductor_config[max_fusion_size]"}',
                "1x40",
            ),
            # pair: two ranks, split evenly: both are named
            *_fp("pair", "graphs", {"0": "1x40", "1": "2x40"}),
            # slow: rank 2 is still compiling what the others compiled: not odd until it finishes
            *_fp("slow", "compiles", {"0": "4x40", "1": "4x40", "2": "3x40"}),
            ('torch_compile_in_progress{job="slow",instance="slow-2",rank="2",kind="frame"}', "1x40"),
        ],
        [
            ("10s", []),
            (
                "150s",
                [
                    (_odd("train", "compiles", "1"), "1"),
                    (_odd("cold", "cache", "1"), "1"),
                    (_odd("pair", "graphs", "0"), "1"),
                    (_odd("pair", "graphs", "1"), "1"),
                ],
            ),
        ],
    ),
}
EVALUATION_INTERVAL = {"TorchCompileRankDivergence": "5s"}  # the others: 1m


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


# What the cache aspect's description adds from the odd rank's torch_compile_cache_last_miss (SCENARIOS' cold job)
LAST_MISS = {"cold-1": " Its latest cache miss: fx_graph graph 0/0 forward, cause config, part inductor_config[max_fusion_size]."}
_CACHE_BLOCK = re.compile(r"\{\{ if eq \$labels\.aspect \"cache\" \}\}.*\{\{ end \}\}\{\{ end \}\}\{\{ end \}\}", re.S)


def _render(template: str, labels: dict[str, str], value: str) -> str:
    """Fill the template forms the rules use: {{ $labels.x }}, {{ $value | ... }}, and the cache aspect's latest miss
    (a query of torch_compile_cache_last_miss: what LAST_MISS says the scenario's series give, else nothing)."""
    miss = LAST_MISS.get(labels.get("instance", ""), "") if labels.get("aspect") == "cache" else ""
    out = _CACHE_BLOCK.sub(lambda m: miss, template)
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], out)
    return re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, out)


def _promtool_tests(interval: str) -> dict[str, Any]:
    rules = _rules()
    tests = []
    for alert, (series, evals) in SCENARIOS.items():
        if EVALUATION_INTERVAL.get(alert, "1m") != interval:
            continue
        rule = rules[alert]
        checks = []
        for at, firing in evals:
            exp = []
            for labels, value in firing:
                exp.append(
                    {
                        "exp_labels": {**rule.get("labels", {}), **labels},
                        "exp_annotations": {k: _render(v, labels, value) for k, v in rule["annotations"].items()},
                    }
                )
            checks.append({"eval_time": at, "alertname": alert, "exp_alerts": exp})
        tests.append(
            {
                "name": alert,
                "interval": interval,
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": checks,
            }
        )
    return {"rule_files": [RULES.name], "evaluation_interval": interval, "tests": tests}


def test_promtool_checks_the_rules():
    r = subprocess.run([require("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS: 9 rules found" in r.stdout, r.stdout + r.stderr


def test_every_alert_has_a_scenario_and_a_runbook():
    rules = _rules()
    assert set(rules) == set(SCENARIOS)
    for name, rule in rules.items():
        runbook = rule["annotations"].get("runbook", "")
        assert len(runbook.split()) >= 20, name  # says what to do, not just a link
        assert any(not firing for _, firing in SCENARIOS[name][1]), f"{name}: no not-firing case"
        assert any(firing for _, firing in SCENARIOS[name][1]), f"{name}: no firing case"


def test_promtool_unit_tests_each_alert_firing_and_not(tmp_path):
    shutil.copy(RULES, tmp_path / RULES.name)
    files = []
    for interval in sorted({"1m", *EVALUATION_INTERVAL.values()}):
        files.append(f"rules-{interval}.test.yml")
        (tmp_path / files[-1]).write_text(yaml.safe_dump(_promtool_tests(interval), sort_keys=False))
    r = subprocess.run([require("promtool"), "test", "rules", *files], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("SUCCESS") == len(files), r.stdout[-6000:] + r.stderr
