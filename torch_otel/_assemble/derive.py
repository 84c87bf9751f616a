"""The derive step: every fact a sink reads that torch's records for a compile do not hold, worked out once.

The assembler calls :class:`Derive` on each finished record before any sink sees it. It fills the record's derived
block (torch_otel._model.record.CompileRecord), never the events: the code a compile inherits from its frame's earlier
compile or its forward, a lazy backward's forward, the compiled-autograd graph a frame ran under, its place against
the recompile limit, the mega-cache hits, each feature's facts (its ``derive``, given its live state in the pipeline),
and last its trace identity from ``tracing`` (the span mapper builds the
compile's trace, so the sinks that name the trace, exemplars and log records, read its ids from the record).

Its memory of earlier compiles is bounded whatever the job's length (``recent``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._analysis.recompile_guards import ACCUMULATED, NEAR, accumulated_limit_of, recompile_limit_of
from .._core.errors import record_error
from .._core.recent import Recent
from .._features.feature import Feature
from .._features.registry import features_or_default
from .._model.record import CodeLocation, CompileRecord, Linked, frame_name

__all__ = ["RECENT", "CacheLoads", "Derive", "Tracing", "guard"]

_SET_TO = re.compile(r"accumulated_recompile_limit\b[^(]*\(currently set to (\d+)\)")
_FrameCode = tuple[CodeLocation, CodeLocation, "str | None", "CodeLocation | None", bool]

# Compiles remembered for what later ones inherit (code locations, a backward's forward): a bounded memory of the
# recent ones, whatever the job's length (tests/workloads/many.py runs past it with a smaller value)
RECENT = 4096


class Tracing(Protocol):
    """Builds a finished compile's trace; returns its root's ``(trace id, span id)``, or None when not traced."""

    def emit(self, record: CompileRecord) -> tuple[int, int] | None: ...


class CacheLoads(Protocol):
    """What a mega-cache load put in this process's caches (:class:`torch_otel._analysis.caches.LoadedKeys`)."""

    def hits(self, record: CompileRecord) -> dict[str, int]: ...


def guard(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; an exception is counted and logged once (``assembler <what>``), and None returned."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a derivation must not starve the sinks
        record_error(f"assembler {what}", exc)
        return None


def _type_check_failed(rec: CompileRecord, cls: str) -> bool:
    """Whether one of the compile's guard failures is torch's check that an object is of class ``cls``
    (``___check_type_id(self, 94...), type=<class 'm.A'>``): an object of another class reached the frame."""
    said = f"type=<class '{cls}'>"
    return any("___check_type_id(" in r and said in r for r in (rec.recompile_reason, *rec.recompile_reasons) if r)


class Derive:
    """The derive step of one assembler (see the module)."""

    def __init__(
        self,
        *,
        tracing: Tracing | None = None,
        cache_loads: CacheLoads | None = None,
        features: tuple[Feature, ...] | None = None,
        feature_states: Mapping[str, Any] | None = None,
        recent: int | None = None,
        recompile_limit: Callable[[], int | None] | None = None,
    ) -> None:
        recent = RECENT if recent is None else recent
        self.tracing = tracing
        self.cache_loads = cache_loads
        self.features = tuple(k for k in features_or_default(features) if k.derive is not None)
        self.feature_states = dict(feature_states or {})
        # live: torch._dynamo.config.recompile_limit, for a compile whose metrics do not say it
        self.recompile_limit = recompile_limit
        # What later compiles inherit: a frame's code by (autograd id, frame id); forwards by compile id (a lazy
        # backward's); compiled-autograd graphs by their id
        # a frame's code as its last compile named it, and the user's line that called it: (torch's code, the code as
        # named, the class that names it, the call site, whether the user's code called it directly)
        self._frame_code: Recent[tuple[int | None, int | None], _FrameCode] = Recent(recent)
        self._forwards: Recent[str, Linked] = Recent(recent)
        self._autograd_graphs: Recent[int, Linked] = Recent(max(1, recent // 4))
        # a frame's compiles so far, and the frames already near the recompile limit (each marked once)
        self._frame_compiles: Recent[tuple[int | None, int | None], int] = Recent(recent)
        self._near_limit: Recent[tuple[int | None, int | None], bool] = Recent(recent)
        # a frame's compiles under each class, and the frames whose one limit counts several classes' entries
        # (torch's code object, kept: a frame id that torch._dynamo.reset() gave to other code is not one of them)
        self._named_compiles: Recent[tuple[tuple[int | None, int | None], str], int] = Recent(recent)
        self._shared: Recent[tuple[int | None, int | None], CodeLocation] = Recent(recent)

    def __call__(self, rec: CompileRecord) -> None:
        rec.seal()  # torch's facts of the finished compile, worked out once for every sink
        cid = rec.compile_id
        torch_code = rec.own_code()
        rec.call_site, rec.called_directly = rec.user_call_site()
        classes = rec.object_classes()
        code, frame_class = frame_name(torch_code, classes, rec.call_site)
        if rec.kind == "frame" and cid is not None:
            key = (cid.compiled_autograd_id, cid.frame_id)
            before = self._frame_code.get(key)
            # the class the frame was named by last, proven not this compile's: torch's check of its type failed
            other = before is not None and before[2] is not None and _type_check_failed(rec, before[2])
            if not (torch_code.function and torch_code.file):
                # a compile that stops before dynamo reports its code or its stack (the recompile-limit check): its
                # frame's, called from where the frame was last called (replay: no stack; live: the stack's own). A
                # frame shared by several classes, or reached by another class than its last, is named by torch's code:
                # which class came, no record says
                if before is not None:
                    torch_code, code, frame_class = before[:3]
                    if other or self._shared.get(key) == torch_code:
                        code, frame_class = torch_code, None
                    if rec.call_site is None:
                        rec.call_site, rec.called_directly = before[3:]
            elif not classes and not rec.guarded and before is not None and before[0] == torch_code and not other:
                code, frame_class = before[1:3]  # no guards of its own to name it by: as its frame's earlier compile
                if rec.call_site is not None:
                    self._frame_code.remember(key, (*before[:3], rec.call_site, rec.called_directly))
            else:
                self._frame_code.remember(key, (torch_code, code, frame_class, rec.call_site, rec.called_directly))
            if other:  # two classes through one code object: one cache, one limit
                self._shared.remember(key, torch_code)
            rec.shared_frame = self._shares_limit(rec, key, torch_code, frame_class, before)
            self._recompile_facts(rec, key)
        if rec.kind == "backward":
            rec.forward = self._forwards.get(rec.id_str)
            if rec.forward is not None and not torch_code.function:
                code, frame_class = rec.forward.code, rec.forward.frame_class
                torch_code = rec.forward.torch_code or code
            if rec.forward is not None:
                rec.call_site = rec.forward.call_site
        rec.code = code
        rec.torch_code = torch_code if torch_code != code else None
        rec.frame_class = frame_class
        if cid is not None and cid.compiled_autograd_id is not None and rec.kind != "compiled_autograd":
            rec.compiled_autograd = self._autograd_graphs.get(cid.compiled_autograd_id)
        if self.cache_loads is not None:
            rec.mega_cache_hits = guard("mega-cache hits", self.cache_loads.hits, rec) or {}
        for feature in self.features:
            derive = feature.derive
            if derive is not None and (feature.event is None or rec.attached.get(feature.name)):  # no event: every compile
                guard(feature.name, derive, rec, self.feature_states.get(feature.name))
        if self.tracing is not None:
            ids = guard("tracing", self.tracing.emit, rec)
            if ids is not None:
                rec.trace_id, rec.span_id = ids
        if rec.kind == "frame":
            self._forwards.remember(
                rec.id_str,
                Linked(
                    rec.id_str, rec.trace_id, rec.span_id, rec.attempt, rec.code, rec.call_site, rec.torch_code, rec.frame_class
                ),
            )
        elif rec.kind == "compiled_autograd" and cid is not None and cid.compiled_autograd_id is not None:
            self._autograd_graphs.remember(cid.compiled_autograd_id, Linked(rec.id_str, rec.trace_id, rec.span_id, rec.attempt))

    def _shares_limit(
        self,
        rec: CompileRecord,
        key: tuple[int | None, int | None],
        torch_code: CodeLocation,
        frame_class: str | None,
        before: _FrameCode | None,
    ) -> bool:
        """Whether this frame compile's torch frame is shared: one code object compiled under several names (torch's
        ``inner`` for every ``torch.nn`` module compiled, a library's ``wrapped_func(*args)`` for every model class it
        wraps), torch counting the others' cache entries toward this compile's recompile limit. It does when the
        frame holds no object it matches by identity (``cache_size``, the entries the limit counts, is more than
        this class's own compiles so far); two models of one class, each matched by its ``self``, are not one frame, nor
        is a frame whose class one compile did not say (its guards not logged)."""
        shared = self._shared.get(key)
        if shared is not None and shared == torch_code:
            return True
        if frame_class is None:
            return False
        own = self._named_compiles.get((key, frame_class), 0)
        self._named_compiles.remember((key, frame_class), own + 1)
        size = (rec.metrics or {}).get("cache_size")
        if (
            before is not None
            and before[0] == torch_code
            and before[2] is not None
            and before[2] != frame_class
            and isinstance(size, int)
            and not isinstance(size, bool)
            and size > own
        ):
            self._shared.remember(key, torch_code)
            return True
        return False

    def _recompile_facts(self, rec: CompileRecord, key: tuple[int | None, int | None]) -> None:
        """A frame compile's place against the recompile limit: its frame's compiles so far, the limit, near it or not."""
        m = rec.metrics or {}
        before = self._frame_compiles.get(key, 0)
        self._frame_compiles.remember(key, before + 1)
        size = m.get("cache_size")
        count = size if isinstance(size, int) and not isinstance(size, bool) else before
        limit = recompile_limit_of(m)
        if limit is None and self.recompile_limit is not None:
            limit = guard("recompile limit", self.recompile_limit)
        # torch's other limit, on every entry of the code object (``accumulated_cache_size``): the one that counts where
        # it was hit, or where it has fewer entries left than ``recompile_limit`` has
        acc, acc_size = accumulated_limit_of(m), m.get("accumulated_cache_size")
        if rec.recompile_limit_hit:
            if ACCUMULATED in (rec.fail_reason or ""):
                rec.recompile_limit_kind = ACCUMULATED
                if acc is None:
                    said = _SET_TO.search(rec.fail_reason or "")
                    acc = int(said.group(1)) if said else None
                limit = acc
                if isinstance(acc_size, int) and not isinstance(acc_size, bool):
                    count = acc_size
        elif (
            acc is not None
            and isinstance(acc_size, int)
            and not isinstance(acc_size, bool)
            and (limit is None or acc - acc_size < limit - count)
        ):
            rec.recompile_limit_kind = ACCUMULATED
            limit, count = acc, acc_size
        rec.frame_recompiles = count
        rec.recompile_limit = limit
        if (
            limit is not None
            and rec.frame_recompiles >= 1
            and not rec.recompile_limit_hit
            and limit - rec.frame_recompiles - 1 <= NEAR
            and key not in self._near_limit
        ):
            rec.recompile_limit_near = True
            self._near_limit.remember(key, True)
