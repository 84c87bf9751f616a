"""Finished compiles -> OpenTelemetry spans: the single span mapping of live capture and replay."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from itertools import compress
from operator import attrgetter, itemgetter
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, Tracer

from .._analysis.divergence import schedule_digest
from .._core.categories import recompile_category, scrub_guard_text, strip_recompile_prefix
from .._core.graph_breaks import graph_break_code
from .._core.health import count_not_sampled
from .._core.settings import Settings
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._model.compilation_metrics import compile_on_one_rank, kernel_sources, user_contexts
from .._model.record import ROOT_NAMES, RUNTIME, CodeLocation, CompileRecord, PhaseNode
from .._otel.direct_spans import DirectSpans, Phases, direct_spans
from .._otel.ids import own_ids, private_random
from .span_model import METRIC_ATTRIBUTES, Events, Root

_METRIC_FIELDS, _METRIC_ATTRS = tuple(METRIC_ATTRIBUTES), tuple(METRIC_ATTRIBUTES.values())
_metric_values = itemgetter(*_METRIC_FIELDS)  # torch's metrics -> those fields' values, in one call
_NUMBERS = frozenset((int, float))
_USUAL = frozenset((int, float, bool, type(None)))  # the types torch's metrics give those fields (else: each checked)

RECOMPILE_LIMIT_MARK = "recompile limit exceeded"
MAX_SCHEDULE_OPS = 64  # collective op names kept on a root span (the digest covers them all)

# Phase-span args that are safe and useful (scalars only).
_PHASE_ARG_SKIP = frozenset(("compile_id", "fn_name"))
_NODE_NAME = attrgetter("name")


@functools.lru_cache(maxsize=1024)
def _meta_key(field: str) -> str:
    """``torch.compile.artifact.metadata.<field>``, built once per field name (torch's names are few)."""
    return f"torch.compile.artifact.metadata.{field}"


@functools.lru_cache(maxsize=64)
def cuda_device_attributes(index: int) -> tuple[tuple[str, Any], ...]:
    """A CUDA device's name and compute capability (read once per device; live only: logs do not name it)."""
    cuda = sys.modules.get("torch.cuda")
    if cuda is None:
        return ()
    try:
        major, minor = cuda.get_device_capability(index)
        name = str(cuda.get_device_name(index))
    except Exception:  # noqa: BLE001 - a broken CUDA runtime: no device attributes, never an error in the user's run
        return ()
    return (
        ("torch.cuda.device.index", index),
        ("torch.cuda.device.name", name),
        ("torch.cuda.device.capability", f"{major}.{minor}"),
    )


_CODE_KEYS: dict[str, tuple[str, str, str]] = {}  # a location's attribute prefix -> its three keys


def torch_trace_file() -> str | None:
    """The file torch's TORCH_TRACE handler writes to in this process, once it has opened one."""
    internal = sys.modules.get("torch._logging._internal")
    handler = getattr(internal, "LOG_TRACE_HANDLER", None)
    path = getattr(handler, "_stream_path", None) or getattr(getattr(handler, "stream", None), "name", None)
    return path if isinstance(path, str) else None


class SpanMapper:
    """Builds spans for a :class:`CompileRecord` with the given tracer."""

    def __init__(
        self,
        tracer: Tracer,
        settings: Settings | None = None,
        live: bool = True,
        tracer_for: Callable[[CompileRecord], Tracer] | None = None,
        features: tuple[Feature, ...] | None = None,
    ) -> None:
        self.tracer = tracer
        # the features with events of their own on the root span (torch_otel._features)
        self._views = tuple(k.spans for k in features_or_default(features) if k.spans is not None)
        # Replay: the tracer of the process that wrote the compile's log (its own resource)
        self.tracer_for = tracer_for
        self.settings = settings or Settings()
        self.live = live
        # A forked child shares its parent's resource (process.pid included): its spans say so themselves.
        self._pid = os.getpid()
        self._stacktraces: dict[tuple[tuple[str, int, str], ...], str] = {}  # a stack's frames -> its text (bounded)
        self._located: dict[tuple[Any, ...], tuple[tuple[str, Any], ...]] = {}  # a frame's locations -> their attributes

    # -- helpers (``text`` and ``path``: what the features' views write with) ------------------------------------
    def text(self, value: object) -> str:
        """``value`` as an attribute's text: capped at ``attribute_max_length``."""
        return self._str(value)

    def path(self, value: object) -> str | None:
        """A file path as the settings say (its name alone with ``redact_paths``)."""
        return self._path(value)

    def _str(self, value: object) -> str:
        s = value if isinstance(value, str) else str(value)
        limit = self.settings.attribute_max_length
        return s if len(s) <= limit else s[: limit - 3] + "..."

    def _path(self, path: object) -> str | None:
        if not isinstance(path, str) or not path:
            return None
        return os.path.basename(path) if self.settings.redact_paths else self._str(path)

    # -- the mapping ----------------------------------------------------------
    def root_attributes(self, rec: CompileRecord) -> dict[str, Any]:
        m: Mapping[str, Any] = rec.metrics or {}
        cid = rec.compile_id
        a: dict[str, Any] = {Root.KIND: rec.kind, Root.ID: rec.id_str}
        if cid is not None:
            if cid.frame_id is not None:
                a["torch.compile.frame_id"] = cid.frame_id
                a["torch.compile.frame_compile_id"] = cid.frame_compile_id
            if cid.compiled_autograd_id is not None:
                a["torch.compiled_autograd.id"] = cid.compiled_autograd_id
        if rec.kind == RUNTIME:  # not a compile: which compiled graph, and what torch timed for it
            if rec.rank is not None:
                a[Root.RANK] = rec.rank
            a["torch.compile.runtime.phases"] = [n.name for n in rec.root.children][:64]
            return a
        a[Root.ATTEMPT] = rec.attempt
        # torch's duration (a frame's CompilationMetrics.duration_us), as the metrics and the summary count it; its
        # outer event, the span, is a few ms longer (docs/metrics.md). Samplers, which see attributes only, read it too
        a[Root.DURATION] = round(rec.duration_s, 9)
        if self.live and os.getpid() != self._pid:
            a["process.pid"] = os.getpid()
            a["process.parent_pid"] = self._pid
        if rec.rank is not None:
            a[Root.RANK] = rec.rank
        origin = rec.origin
        if origin is not None and origin.cuda_device is not None:
            a.update(cuda_device_attributes(origin.cuda_device))
        if rec.forward is not None:  # a lazy backward: its forward's attempt (and tlparse directory)
            a[Root.ATTEMPT] = rec.forward.attempt
        a.update(self._locations(rec))
        if origin is not None and origin.stack:  # Python's traceback form, most recent call last
            a["code.stacktrace"] = self._stacktrace(origin.stack)
        try:  # every field at once (a frame's metrics have them all), else each that is there
            values = _metric_values(m)
        except KeyError:
            values = tuple(map(m.get, _METRIC_FIELDS))
        types = list(map(type, values))
        if _USUAL.issuperset(types):  # the numbers kept (a flag is not one), picked in C: torch's usual types
            a.update(compress(zip(_METRIC_ATTRS, values, strict=True), map(_NUMBERS.__contains__, types)))
        else:
            for attr, v in zip(_METRIC_ATTRS, values, strict=True):  # a number of a subclass of its own (NumPy's)
                t = type(v)
                if t is int or t is float or (t not in _USUAL and isinstance(v, (int, float)) and not isinstance(v, bool)):
                    a[attr] = v
        reason = rec.recompile_reason
        if reason:
            text = strip_recompile_prefix(reason)
            if not self.settings.capture_payloads:  # the opt-in that lets source text and values out
                text = scrub_guard_text(text)
            a[Root.RECOMPILE_REASON] = self._str(text)
            a["torch.compile.recompile_reason.category"] = recompile_category(reason)
        if rec.recompile_reasons:  # every cache entry's guard failure, as tlparse lists them
            texts = [strip_recompile_prefix(r) for r in rec.recompile_reasons]
            if not self.settings.capture_payloads:
                texts = [scrub_guard_text(t) for t in texts]
            a[Root.RECOMPILE_REASONS] = [self._str(t) for t in texts]
            a["torch.compile.recompile_reasons.categories"] = [recompile_category(r) for r in rec.recompile_reasons]
        a["torch.compile.is_recompile"] = bool(reason or rec.recompile_reasons or (cid is not None and cid.frame_compile_id))
        if rec.recompile_limit is not None and a["torch.compile.is_recompile"]:  # torch._dynamo.config's, as it compiled
            a[Root.RECOMPILE_LIMIT] = rec.recompile_limit
        if isinstance(m.get("has_guarded_code"), bool):
            a[Root.HAS_GUARDED_CODE] = m["has_guarded_code"]
        if compile_on_one_rank(m):
            a[Root.COMPILE_ON_ONE_RANK] = True
        contexts = user_contexts(m)
        if contexts:  # the user's own words, from hooks they registered for this
            a[Root.USER_CONTEXTS] = [self._str(c) for c in contexts]
        kernels = kernel_sources(m)
        if kernels:  # file and line only: the source text torch keeps beside them stays in the process
            a[Root.KERNEL_SOURCES] = [
                f"{k} {self._path(f) or '?'}:{n if n is not None else '?'}" + (f" ({fn})" if fn else "")
                for k, f, n, fn in kernels
            ]
        restarts = m.get("restart_reasons")
        if isinstance(restarts, (list, set, tuple)):
            a["torch.compile.restart_count"] = len(restarts)
        a["torch.compile.graph_break_count"] = len(rec.handled_graph_breaks)
        if rec.recompile_limit_hit:
            a[Root.RECOMPILE_LIMIT_EXCEEDED] = True
        if rec.eager_fallback:
            a[Root.EAGER_FALLBACK] = True
        if rec.fail_type:
            a[Root.ERROR_TYPE] = rec.fail_type
            fp = self._path(m.get("fail_user_frame_filename"))
            if fp:
                a["torch.compile.fail.file.path"] = fp
            if isinstance(m.get("fail_user_frame_lineno"), int):
                a["torch.compile.fail.line.number"] = m["fail_user_frame_lineno"]
        elif rec.incomplete:
            a[Root.ERROR_TYPE] = Root.INCOMPLETE
        for node in rec.root.children:
            if node.name in ("backend_compile", "inductor_compile") and isinstance(node.args.get("cache_state"), str):
                a[f"torch.compile.cache.{node.name}.state"] = node.args["cache_state"]
        self._gpu_attributes(m, a)
        if rec.backward_index is not None:
            a["torch.compile.backward.index"] = rec.backward_index
        aot = rec.origin.aot_graph if rec.origin is not None else None
        if aot:
            a["torch.compile.aot_graph"] = aot
        if rec.kind == "frame":
            graphs = list(map(_NODE_NAME, rec.phase_nodes())).count("create_aot_dispatcher_function")
            if graphs > 1:  # DDP's optimizer split the frame: one graph, and one lazy backward, per bucket
                a["torch.compile.aot_graph_count"] = graphs
        if rec.schedules:  # inductor graphs: their collective schedule, to compare across ranks
            a["torch.compile.inductor.graph_count"] = len(rec.schedules)
            ops = [op for s in rec.schedules for op in s.collectives]
            a["torch.compile.collectives.count"] = len(ops)
            if ops:
                a["torch.compile.collectives.digest"] = schedule_digest(ops)
                a["torch.compile.collectives.schedule"] = ops[:MAX_SCHEDULE_OPS]
            metas = [s.tensor_meta for s in rec.schedules if s.tensor_meta]
            if metas:
                a["torch.compile.inductor.tensor_meta_digest"] = metas[0] if len(metas) == 1 else schedule_digest(metas)
        self._artifact_places(rec, a)
        for cache, n in rec.mega_cache_hits.items():
            a[f"torch.compile.cache.{cache}.mega_cache.hits"] = n
        if rec.kind == "export":
            args = rec.root.args
            a["torch.export.api"] = args.get("api") if isinstance(args.get("api"), str) else "torch.export.export"
            # torch logs a root (fullgraph_capture) only for a strict export's dynamo capture
            a["torch.export.strict"] = bool(args.get("strict", rec.root.name == "fullgraph_capture"))
            failures = args.get("draft_failures")
            if isinstance(failures, dict):
                a["torch.export.draft_export.failure_count"] = sum(v for v in failures.values() if isinstance(v, int))
        if rec.dropped:
            a["torch.compile.dropped_events"] = rec.dropped
        return a

    def _locations(self, rec: CompileRecord) -> tuple[tuple[str, Any], ...]:
        """The compiled code's attributes, torch's code object's where the frame is named otherwise (its class), the
        class's and the caller's: worked out once per frame and call site (they come back at each of its compiles)."""
        site = rec.call_site or rec.caller()
        key = (rec.code, rec.torch_code, rec.frame_class, site)
        got = self._located.get(key)
        if got is None:
            a: dict[str, Any] = {}
            self._code_attributes(rec.code, a, "code")
            if rec.torch_code is not None:
                self._code_attributes(rec.torch_code, a, Root.TORCH_CODE)
            if rec.frame_class:
                a[Root.FRAME_CLASS] = self._str(rec.frame_class)
            self._code_attributes(site, a, "torch.compile.caller")
            got = tuple(a.items())
            if len(self._located) >= 1024:
                self._located.clear()
            self._located[key] = got
        return got

    def _stacktrace(self, stack: list[tuple[str, int, str]]) -> str:
        """The frames as Python's traceback writes them; each stack's text kept (a call site's stack comes back at each
        of its compiles)."""
        key = tuple(stack)
        try:
            text = self._stacktraces.get(key)
        except TypeError:  # a frame that is not (file, line, function): written, not kept
            key, text = (), None
        if text is None:
            lines = [f'  File "{self._path(f) or "?"}", line {n}, in {fn}' for f, n, fn in reversed(stack)]
            text = self._str("\n".join(lines))
            if len(self._stacktraces) >= 1024:
                self._stacktraces.clear()
            if key:
                self._stacktraces[key] = text
        return text

    def _gpu_attributes(self, m: Mapping[str, Any], a: dict[str, Any]) -> None:
        """torch's GPU facts about a compile: why it skipped cudagraphs, and the Triton kernel builds it lists."""
        skip = m.get("cudagraph_skip_reason")
        if isinstance(skip, str) and skip.strip():
            # "skipping cudagraphs due to mutated inputs (1 instances). Found from : <the user's source lines>"
            text = skip if self.settings.capture_payloads else skip.strip().split("\n", 1)[0].split(". Found from", 1)[0]
            a["torch.compile.cudagraph_skip_reason"] = self._str(text.strip())
        builds = m.get("triton_kernel_compile_times_us")
        if isinstance(builds, str) and builds:
            try:
                listed = json.loads(builds)  # [[kernel name, us], ...]: torch keeps the 25 slowest
            except ValueError:
                return
            times = [t[1] for t in listed if isinstance(t, list) and len(t) == 2 and isinstance(t[1], (int, float))]
            if times:
                a["torch.compile.triton.kernels_listed"] = len(times)
                a["torch.compile.triton.kernel_build_s"] = round(sum(times) / 1e6, 6)

    def _code_attributes(self, code: CodeLocation, a: dict[str, Any], prefix: str) -> None:
        """``<prefix>.function.name``, ``.file.path`` and ``.line.number`` of a location (the compiled code, its caller)."""
        keys = _CODE_KEYS.get(prefix)
        if keys is None:
            keys = _CODE_KEYS[prefix] = (f"{prefix}.function.name", f"{prefix}.file.path", f"{prefix}.line.number")
        if code.function is not None:
            a[keys[0]] = self._str(code.function)
        p = self._path(code.file)
        if p:
            a[keys[1]] = p
        if code.line is not None:
            a[keys[2]] = code.line

    def _artifact_places(self, rec: CompileRecord, a: dict[str, Any]) -> None:
        """Where to look next: inductor's debug directories and their files, the TORCH_TRACE file, tlparse's directory."""
        if rec.debug_dirs:
            a["torch.compile.inductor.debug_dirs"] = [self._path(d) or "?" for d in rec.debug_dirs]
            files: set[str] = set()
            for d in rec.debug_dirs:
                try:
                    files.update(e.name for e in os.scandir(d) if e.is_file())
                except OSError:  # removed since, or another host's path
                    continue
            if files:
                a["torch.compile.inductor.debug_files"] = sorted(files)[:64]
        trace_file = rec.trace_file or (torch_trace_file() if self.live else None)
        if trace_file:
            a["torch.compile.trace_log.file"] = self._path(trace_file) or "?"
            cid = rec.compile_id
            if cid is not None and cid.frame_id is not None:
                ca = "-" if cid.compiled_autograd_id is None else cid.compiled_autograd_id
                attempt = a.get("torch.compile.attempt", rec.attempt)  # a lazy backward's is its forward's
                a["torch.compile.tlparse.directory"] = f"{ca}_{cid.frame_id}_{cid.frame_compile_id}_{attempt}"

    def emit(self, rec: CompileRecord) -> tuple[int, int] | None:
        """Build the compile's trace; its root's ``(trace id, span id)``, or None when the sampler dropped it.

        The assembler calls this as it derives the record's facts (:class:`torch_otel._assemble.derive.Tracing`), so
        the sinks that name the trace (exemplars, log records) read the ids from the record.
        """
        m: Mapping[str, Any] = rec.metrics or {}
        attrs = self.root_attributes(rec)
        name = ROOT_NAMES.get(rec.kind, "torch.compile")
        parent: Context | None = rec.origin.parent_context if rec.origin is not None else None
        links: list[Link] = []
        for linked, why in ((rec.compiled_autograd, "compiled_autograd"), (rec.forward, "forward")):
            if linked is not None and linked.trace_id and linked.span_id:
                ctx = trace.SpanContext(linked.trace_id, linked.span_id, False, trace.TraceFlags(trace.TraceFlags.SAMPLED))
                links.append(Link(ctx, {"torch.compile.link": why}))
        tracer = self.tracer_for(rec) if self.tracer_for is not None else self.tracer
        with nullcontext() if own_ids(tracer) else private_random():
            direct = direct_spans(tracer)
            if direct is not None and direct.roots:  # the same root the SDK's start_span makes, built finished
                root = direct.root(name, parent, attrs, links, rec.root.start_ns)
            else:
                root = tracer.start_span(
                    name,
                    context=parent,
                    kind=SpanKind.INTERNAL,
                    attributes=attrs,
                    links=links,
                    start_time=rec.root.start_ns,
                )
            if not root.is_recording():  # no trace of this compile: build nothing more of it
                if root.get_span_context().is_valid:  # an SDK's sampler dropped it (traces off: no tracer, no count)
                    count_not_sampled(rec.kind)
                return None
            ctx = root.get_span_context()
            phases = direct.phases(ctx) if direct is not None else None
            if direct is not None and phases is not None:  # the same spans, written as the bytes the encoder sends
                for child in rec.root.children:
                    self._phase_written(direct, phases, child, ctx.span_id, tracer)
            elif direct is not None:  # the same spans the SDK's path makes, handed to its processors finished
                for child in rec.root.children:
                    self._phase_direct(direct, child, ctx, tracer)
            else:
                parent_ctx = trace.set_span_in_context(root)
                for child in rec.root.children:
                    self._phase_span(tracer, child, parent_ctx)
            self._events(rec, root, m, tracer)
            if rec.recompile_limit_near:
                self._near_limit_event(rec, root)
            self._status(rec, root, m, attrs)
            root.end(end_time=rec.root.end_ns)
        return ctx.trace_id, ctx.span_id

    def _scalar_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in args.items():
            if k in _PHASE_ARG_SKIP or len(out) >= 32:
                continue
            if isinstance(v, bool) or isinstance(v, (int, float)):
                out[f"torch.compile.{k}"] = v
            elif (
                isinstance(v, str)
                and len(v) <= 256
                and k
                in (
                    "cache_state",
                    "cache_bypass_reason",
                    "key",
                    "dispatch_mode",
                    "cache_event_time",
                    "triton_version",
                    "attributed",
                )
            ):
                out[f"torch.compile.{k}"] = v
        return out

    def _phase_span(self, tracer: Tracer, node: PhaseNode, parent_ctx: Context) -> None:
        span = tracer.start_span(
            node.name,
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes=self._scalar_args(node.args),
            start_time=node.start_ns,
        )
        for iname, its, iargs in node.instants:
            span.add_event(iname, self._scalar_args(iargs), timestamp=its)
        if node.children:
            ctx = trace.set_span_in_context(span)
            for child in node.children:
                self._phase_span(tracer, child, ctx)
        span.end(end_time=node.end_ns)

    def _phase_direct(self, direct: DirectSpans, node: PhaseNode, parent: trace.SpanContext, tracer: Tracer) -> None:
        """``_phase_span`` through :mod:`torch_otel._otel.direct_spans`: a span whose events the tracer's limit cannot
        hold takes the SDK's path (which keeps the newest and counts the rest), with its children."""
        limit = direct.limits.max_events
        if limit is not None and len(node.instants) > limit:
            self._phase_span(tracer, node, trace.set_span_in_context(trace.NonRecordingSpan(parent)))
            return
        ctx = direct.context(parent)
        for child in node.children:  # handed over first, as the SDK ends a span after its children
            self._phase_direct(direct, child, ctx, tracer)
        scalar = self._scalar_args
        events = [(iname, its, scalar(iargs)) for iname, its, iargs in node.instants]
        direct.span(node.name, ctx, parent, scalar(node.args), events, node.start_ns, node.end_ns)

    def _phase_written(self, direct: DirectSpans, phases: Phases, node: PhaseNode, parent_id: int, tracer: Tracer) -> None:
        """``_phase_direct`` as bytes (:class:`torch_otel._otel.direct_spans.Phases`), each span's id drawn where that
        draws it; a span with events, or one never closed, is the direct path's, with its children."""
        if node.instants or node.end_ns is None:
            self._phase_direct(direct, node, phases.context(parent_id), tracer)
            return
        span_id = phases.generate()
        for child in node.children:  # written first, as the SDK ends a span after its children
            self._phase_written(direct, phases, child, span_id, tracer)
        args = node.args  # most phases' only say their compile: no attribute, and nothing to look at
        attributes = {} if _PHASE_ARG_SKIP.issuperset(args) else self._scalar_args(args)
        if not phases.span(node.name, span_id, parent_id, attributes, node.start_ns, node.end_ns):
            direct.span(node.name, phases.context(span_id), phases.context(parent_id), attributes, (), node.start_ns, node.end_ns)

    @staticmethod
    def _event_limit(tracer: Tracer) -> int:
        """The SDK's events-per-span limit (``OTEL_SPAN_EVENT_COUNT_LIMIT``, 128 by default) of the tracer in use."""
        limit = getattr(getattr(tracer, "_span_limits", None), "max_events", None)
        return limit if isinstance(limit, int) and limit > 0 else 128

    def _events(self, rec: CompileRecord, root: trace.Span, m: Mapping[str, Any], tracer: Tracer) -> None:
        """The root's events, each at the time torch recorded it, kept inside the compile's span.

        The SDK keeps a span's newest events only: the bulk records of full capture (artifacts) come
        first and take what room the events a user needs leave them (graph breaks, restarts, the
        instants, exceptions and the recompile-limit hit). What did not fit is counted on the span.
        """
        start, end = rec.root.start_ns, rec.root.end_ns if rec.root.end_ns is not None else rec.root.start_ns

        def at(ts: int | None) -> int:
            return min(max(ts if ts is not None else end, start), end)

        restarts = m.get("restart_reasons")
        restart_texts = sorted(str(x) for x in restarts) if isinstance(restarts, (list, set, tuple)) else []
        kind_events = [e for view in self._views for e in view.events(rec, self)]
        needed = len(rec.graph_breaks) + len(restart_texts) + len(rec.root.instants) + len(kind_events) + 2
        room = max(0, self._event_limit(tracer) - needed)
        if rec.artifacts:
            root.set_attribute("torch.compile.artifact_count", len(rec.artifacts))
            if len(rec.artifacts) > room:
                root.set_attribute("torch.compile.artifacts_not_attached", len(rec.artifacts) - room)
        payloads = self.settings.capture_payloads
        for art in rec.artifacts[:room]:
            aa: dict[str, Any] = {
                "torch.compile.artifact.name": art.name,
                "torch.compile.artifact.kind": art.record_type,
                "torch.compile.artifact.size": art.size,
            }
            if art.digest:
                aa["torch.compile.artifact.hash"] = art.digest
            for k, v in art.attributes.items():
                # The record's own fields, kept apart from ours (describe_storage has its own "size").
                if isinstance(v, str):
                    aa[_meta_key(k)] = self._str(v)
                elif isinstance(v, (int, float, bool)):
                    aa[_meta_key(k)] = v
            if payloads and art.payload is not None:
                aa["torch.compile.artifact.payload"] = self._str(art.payload)
            root.add_event("torch.compile.artifact", aa, timestamp=at(art.ts_ns))
        for iname, its, iargs in rec.root.instants:
            root.add_event(iname, self._scalar_args(iargs), timestamp=at(its))
        for name, attributes, ts in kind_events:
            root.add_event(name, attributes, timestamp=at(ts))
        for gb in rec.graph_breaks:
            ga: dict[str, Any] = {Events.GRAPH_BREAK_REASON: self._str(gb.reason)}
            if gb.gb_type:
                ga[Events.GRAPH_BREAK_TYPE] = self._str(gb.gb_type)
            ga[Events.GRAPH_BREAK_CODE] = graph_break_code(gb.gb_type, gb.reason)
            p = self._path(gb.filename)
            if p:
                ga[Root.CODE_FILE] = p
            if gb.lineno is not None:
                ga[Root.CODE_LINE] = gb.lineno
            if gb.skipped_frame:  # torch could not handle it: the compile failed, and its frame runs in eager
                ga[Root.EAGER_FALLBACK] = True
            elif gb.ends_frame:  # torch could not resume after it: the rest of the function ran in eager
                ga[Events.GRAPH_BREAK_ENDS_FRAME] = True
            root.add_event(Events.UNHANDLED_GRAPH_BREAK if gb.skipped_frame else Events.GRAPH_BREAK, ga, timestamp=at(gb.ts_ns))
        failures = rec.root.args.get("draft_failures") if rec.kind == "export" else None
        if isinstance(failures, dict):  # draft export's report: one event per kind of failure it found
            for ftype, count in sorted(failures.items()):
                root.add_event(
                    "torch.export.draft_export.failure",
                    {"torch.export.draft_export.failure_type": str(ftype), "torch.export.draft_export.failure_count": count},
                    timestamp=rec.root.end_ns,
                )
        if not restart_texts:
            return
        # A restart starts the next attempt: torch's compile_attempt_N (N >= 1) begins when it happened.
        attempts = sorted(
            n.start_ns for n in rec.phase_nodes() if n.name.startswith("compile_attempt_") and n.name != "compile_attempt_0"
        )
        for i, r in enumerate(restart_texts):
            ts = attempts[min(i, len(attempts) - 1)] if attempts else None
            root.add_event("torch.compile.restart", {"torch.compile.restart.reason": self._str(r)}, timestamp=at(ts))

    def _near_limit_event(self, rec: CompileRecord, root: trace.Span) -> None:
        """Once per frame: its first compile within two recompiles of ``torch._dynamo.config.recompile_limit``."""
        limit, so_far = rec.recompile_limit or 0, rec.frame_recompiles or 0
        attrs: dict[str, Any] = {
            Root.RECOMPILE_LIMIT: limit,
            "torch.compile.frame_recompiles": so_far,
            "torch.compile.recompiles_left": max(0, limit - so_far - 1),
        }
        if rec.code.function:
            attrs[Root.CODE_FUNCTION] = self._str(rec.code.function)
        root.add_event(Events.RECOMPILE_LIMIT_NEAR, attrs, timestamp=rec.root.end_ns)

    def _status(self, rec: CompileRecord, root: trace.Span, m: Mapping[str, Any], attrs: Mapping[str, Any]) -> None:
        fail_type = rec.fail_type
        if fail_type:
            message = self._str(rec.fail_reason or fail_type)
            root.add_event(
                Events.EXCEPTION, {"exception.type": fail_type, Events.EXCEPTION_MESSAGE: message}, timestamp=rec.root.end_ns
            )
            if rec.recompile_limit_hit:
                fn = attrs.get("code.function.name") or "frame"
                what = "now runs in eager" if rec.eager_fallback else f"raised {fail_type} into the caller"
                desc = f"{RECOMPILE_LIMIT_MARK}: {fn} {what} (raise torch._dynamo.config.recompile_limit or fix the recompiles)"
                root.add_event(
                    "torch.compile.recompile_limit_exceeded", {"code.function.name": self._str(fn)}, timestamp=rec.root.end_ns
                )
            else:
                desc = f"{fail_type}: {message.splitlines()[0] if message else ''}"
            root.set_status(Status(StatusCode.ERROR, self._str(desc)))
        elif rec.incomplete:
            root.add_event(
                Events.EXCEPTION,
                {"exception.type": Root.INCOMPLETE, Events.EXCEPTION_MESSAGE: rec.incomplete},
                timestamp=rec.root.end_ns,
            )
            root.set_status(Status(StatusCode.ERROR, f"compile did not finish: {rec.incomplete}"))
