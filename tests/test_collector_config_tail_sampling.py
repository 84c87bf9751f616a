"""The fleet gateway's tail-sampling policies (collector-config/fleet/gateway.yaml) over real compiles' spans.

A model of the deterministic policies, written here, is applied to the traces the bridge makes of a
plain compile, a recompile, a recompile-limit hit and a failed backend.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import torch
from collector_helpers import tail_sampling
from opentelemetry.sdk.trace import ReadableSpan

from torch_otel._demo import hit_recompile_limit


def _policy_keeps(policy: dict[str, Any], spans: list[ReadableSpan]) -> bool:
    """The tail_sampling processor's rule for the deterministic policy types, over one trace."""
    kind = policy["type"]
    cfg = policy[kind]
    attrs = [{**dict(s.resource.attributes), **dict(s.attributes or {})} for s in spans]
    if kind == "status_code":
        return any(s.status.status_code.name in cfg["status_codes"] for s in spans)
    if kind == "boolean_attribute":
        return any(a.get(cfg["key"]) is cfg["value"] for a in attrs)
    if kind == "string_attribute":
        return any(a.get(cfg["key"]) in cfg["values"] for a in attrs)
    if kind == "latency":
        duration_ns = max(s.end_time for s in spans) - min(s.start_time for s in spans)
        return duration_ns >= cfg["threshold_ms"] * 1_000_000
    raise AssertionError(f"no model of policy type {kind}")


def test_tail_sampling_policies_on_real_compiles(cap):
    hit_recompile_limit(backend="eager")  # 0/0, a recompile 0/1, then the limit hit 0/2, then eager

    def broken(gm, example_inputs):  # noqa: ANN001, ANN202
        raise RuntimeError("a backend that fails")

    with pytest.raises(Exception, match="a backend that fails"):
        torch.compile(lambda x: x.cos() * 3, backend=broken)(torch.randn(4))

    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in cap.spans():
        traces[span.context.trace_id].append(span)
    deterministic = [p for p in tail_sampling()["policies"] if p["type"] != "probabilistic"]
    kept_by: dict[str, set[str]] = {}
    for spans in traces.values():
        (root,) = [s for s in spans if s.parent is None]
        assert root.attributes and "torch.compile.kind" in root.attributes, "one trace per compile"
        # the phases lie inside the root: the trace's duration, which the latency policy reads, is the compile's
        assert min(s.start_time for s in spans) == root.start_time and max(s.end_time for s in spans) == root.end_time
        key = root.attributes.get("error.type") and (
            "limit" if root.attributes.get("torch.compile.recompile_limit_exceeded") else "failed"
        )
        kept_by[f"{key or 'ok'} {root.attributes['torch.compile.id']}"] = {
            p["name"] for p in deterministic if _policy_keeps(p, spans)
        }
    limit_hit = next(k for k in kept_by if k.startswith("limit "))
    failed = next(k for k in kept_by if k.startswith("failed "))
    by_type = {p["name"]: p["type"] for p in deterministic}
    assert {by_type[n] for n in kept_by[limit_hit]} == {"status_code", "boolean_attribute"}, kept_by
    assert {by_type[n] for n in kept_by[failed]} == {"status_code"}, kept_by
    plain = {k: v for k, v in kept_by.items() if k.startswith("ok ")}
    assert len(plain) == 2 and not any(plain.values()), f"left to the probabilistic share: {kept_by}"
