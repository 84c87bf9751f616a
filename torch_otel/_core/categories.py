"""Bounded label vocabularies: recompile reason categories, phases, fail types."""

from __future__ import annotations

import functools
import re
import threading

# Order matters: the first pattern that matches names the category.
_RECOMPILE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # torch's global state: grad mode (train to eval), autocast, deterministic algorithms, default dtype, ...
    ("global_state", re.compile(r"GLOBAL_STATE changed|___check_global_state|grad_mode", re.I)),
    # compiled autograd's cache miss (TORCH_LOGS=compiled_autograd_verbose): a node its cache had not seen
    ("autograd_graph", re.compile(r"new autograd node", re.I)),
    # a tensor check's size, or a guard on sizes: dynamo's shape guards compare its inputs' sizes with each other or with
    # a number (``L['x'].size()[1] == 8``; Mamba's ``((-1) + (L['ids'].size()[1] // 2)) // 2 == (2*(...)``)
    (
        "size_mismatch",
        re.compile(
            r"size mismatch|sizes? (?:of|for) .* changed|changed shapes|Ne\(|Eq\(|<= |>= |\.size\(\)|\.storage_offset\(\)", re.I
        ),
    ),
    ("stride_mismatch", re.compile(r"stride mismatch|\.stride\(\)", re.I)),
    ("dtype", re.compile(r"dtype mismatch|dtype", re.I)),
    ("device", re.compile(r"device mismatch|device", re.I)),
    ("requires_grad", re.compile(r"requires_grad", re.I)),
    ("rank", re.compile(r"rank mismatch|ndim|dim\(\) mismatch|dimensionality", re.I)),
    ("type", re.compile(r"expected type of|type mismatch|___check_type_id|isinstance|tensor type", re.I)),
    ("id", re.compile(r"___check_obj_id|id mismatch|object identity|___check_current_backend|is not None|is None", re.I)),
    ("value", re.compile(r"==|!=|___check_.*_match|constant|len\(", re.I)),
)

RECOMPILE_CATEGORIES: tuple[str, ...] = tuple(c for c, _ in _RECOMPILE_RULES) + ("other",)
_LOWER_RULES = tuple((name, re.compile(pat.pattern.lower())) for name, pat in _RECOMPILE_RULES)

GUARD_COMMENT = "  # "  # what torch puts between a guard's code and its source comment (dynamo's get_verbose_code_part)
_PREFIX_RE = re.compile(r"^\s*(?:!\d+/)?\d+/\d+(?:_\d+)?:\s*")


# A recompile reason is kept whole in the run summary's JSON (JSON is for machines); this bounds a pathological one
REASON_CHARS = 4096


@functools.lru_cache(maxsize=512)
def strip_recompile_prefix(reason: str) -> str:
    """``'0/0: tensor 'x' size mismatch ...'`` -> ``"tensor 'x' size mismatch ..."``."""
    if not reason:
        return reason
    line = reason.split("\n", 1)[0]
    m = _PREFIX_RE.match(line)  # anchored: only ever at the start
    return (line[m.end() :] if m else line).strip()


@functools.lru_cache(maxsize=512)  # a frame's every recompile lists its earlier cache entries' failures again
def recompile_category(reason: str | None) -> str:
    """Map a guard failure to one of :data:`RECOMPILE_CATEGORIES`, by the guard alone: torch appends to a guard's code
    the user's source line it came from (``L['n'] == 3  # if x.dtype == y:  # m.py:5 in f``), whose words (``dtype``,
    ``is not None``) are not the guard's."""
    if not reason:
        return "other"
    text = strip_recompile_prefix(reason).split(GUARD_COMMENT, 1)[0].lower()
    for name, pat in _LOWER_RULES:  # the rules in lower case on the text in lower case: as re.I, several times faster
        if pat.search(text):
            return name
    return "other"


# torch's dynamo_timed names -> the documented, fixed phase label set. A label named like a CompilationMetrics
# field covers the events torch adds into that field, so the two agree (docs/metrics.md lists each label's record).
PHASES: dict[str, str] = {
    "bytecode_tracing": "dynamo_tracing",
    # torch's backend_compile_time_s (aot_autograd_cumulative_compile_time_us): OutputGraph.call_user_compiler
    "backend_compile": "backend_compile",
    "OutputGraph.call_user_compiler": "backend_compile",
    # AOTAutograd building its dispatcher: joint-graph tracing, partitioning, and the inductor compiles it calls
    "create_aot_dispatcher_function": "aot_dispatcher",
    # torch's inductor_compile_time_s: compile_fx_inner (logged as inductor_compile), not the graph passes before it
    "inductor_compile": "inductor",
    "compile_fx_inner": "inductor",
    "GraphLowering.run": "inductor_lowering",
    # torch's code_gen_time_s: GraphLowering.compile_to_module (logged as code_gen). AOTInductor runs
    # GraphLowering.codegen outside it, and torch records no code_gen time for it.
    "code_gen": "codegen",
    "GraphLowering.compile_to_module": "codegen",
    "GraphLowering.codegen": "codegen",
    "compile_file": "cpp_compile",
    # Waiting for the kernels being compiled in parallel: Triton's on a GPU, C++ builds on a CPU.
    "async_compile.wait": "kernel_compile_wait",
    # torch's triton_compile_time_us: Triton builds on the compile's thread when kernels build one at a time
    # (async_compile.precompile), plus the wait when they build in parallel (see PHASES_ALSO)
    "async_compile.precompile": "triton_compile",
    # GPU (torch 2.13's names, seen in real CUDA logs): benchmarking kernel configs and pad_mm choices, and setting up
    # the cudagraph tree of a graph.
    # torch's runtime_triton_autotune_time_us: a kernel's configs benchmarked at its first run (max-autotune adds a
    # coordinate-descent search after it), the same with combo kernels
    "CachingAutotuner.benchmark_all_configs": "autotune",
    "CachingAutotuner.coordinate_descent_tuning": "autotune",
    "CachingAutotuner.combo_sequential_autotune": "autotune",
    # torch's compile_time_autotune_time_us: max-autotune's template choices (<op>_template_autotuning and
    # <op>_template_precompiling, see PHASE_SUFFIXES) and the benchmarking of fused nodes
    "benchmark_fused_nodes": "autotune",
    "benchmark_codegened_module": "autotune",
    "pad_mm_benchmark": "autotune",
    "InductorBenchmarker.benchmark_gpu": "autotune",
    "TritonBenchmarker.benchmark_gpu": "autotune",
    # torch's runtime_cudagraphify_time_us: a graph's cudagraph tree set up, and each graph it records (a new input
    # size of a dynamic graph records anew)
    "cudagraphify.get_container": "cudagraphs",
    "CUDAGraphNode.record": "cudagraphs",
    "CUDAGraphTreeManager.add_function": "cudagraphs",  # recording a graph's cudagraph tree (its first run)
    # AOTInductor: building the model's .so (its compile_file steps are cpp_compile)
    "AotCodeCompiler.compile": "aot_inductor_build",
    "build_guards": "guard_building",
    "AOTAutogradCache.inductor_load": "cache_load",
    "PyCodeCache.load_by_key_path": "cache_load",
    "CompiledArtifact.load": "cache_load",
    # torch's backward_cumulative_compile_time_us
    "entire_backward_compile": "backward_compile",
    "compiled_autograd": "compiled_autograd",
    # torch's gc_time_us
    "gc": "gc",
}
# Events that count in a second label too: torch adds the parallel build's wait into triton_compile_time_us.
PHASES_ALSO: dict[str, tuple[str, ...]] = {"async_compile.wait": ("triton_compile",)}

# Event names torch builds from an op's name ("mm_template_autotuning", "addmm_template_precompiling"), by suffix
PHASE_SUFFIXES: tuple[tuple[str, str], ...] = (("_template_autotuning", "autotune"), ("_template_precompiling", "autotune"))

PHASE_LABELS: tuple[str, ...] = tuple(sorted(set(PHASES.values())))
# torch's CompilationMetrics fields that each time a phase -> the phase label named like it (its events are the ones torch
# adds into the field, so a compile's phase metric and the field agree: docs/metrics.md, Phase labels), and the field's
# unit in seconds. Two fields add into ``autotune``: the compile-time and the runtime autotuning.
PHASE_FIELDS: dict[str, tuple[str, float]] = {
    "backend_compile_time_s": ("backend_compile", 1.0),
    "inductor_compile_time_s": ("inductor", 1.0),
    "code_gen_time_s": ("codegen", 1.0),
    "triton_compile_time_us": ("triton_compile", 1e-6),
    "backward_cumulative_compile_time_us": ("backward_compile", 1e-6),
    "gc_time_us": ("gc", 1e-6),
    "runtime_cudagraphify_time_us": ("cudagraphs", 1e-6),
    "runtime_triton_autotune_time_us": ("autotune", 1e-6),
    "compile_time_autotune_time_us": ("autotune", 1e-6),
}


@functools.lru_cache(maxsize=1024)  # torch's event names are few
def phase_label(name: str) -> str | None:
    """The phase label of one of torch's timed events (:data:`PHASES`, then :data:`PHASE_SUFFIXES`), or None."""
    label = PHASES.get(name)
    if label is None:
        label = _SUFFIXED.get(name, "")
        if label == "":  # a name not in the table: its suffix, looked at once (torch's event names are few)
            label = next((lab for suffix, lab in PHASE_SUFFIXES if name.endswith(suffix)), None)
            if len(_SUFFIXED) < 4096:
                _SUFFIXED[name] = label
    return label


_SUFFIXED: dict[str, str | None] = {}  # the names PHASES lacks -> their label by suffix, or None ("": not seen)


class BoundedLabels:
    """Keeps at most ``limit`` distinct values; the rest fold into ``other``."""

    def __init__(self, limit: int = 50) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if not value:
            return "other"
        value = value[:64]
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) >= self._limit:
                return "other"
            self._seen.add(value)
            return value


# Dynamo appends the guarded source line and its location to a guard: "x == 3  # y = x * 3  # f.py:9 in f".
_GUARD_SOURCE = re.compile(r"\s+#\s.*$")
# What a value guard compares with: the user's constants (hyper-parameters, strings, lists), after its operator.
_GUARD_OPERATOR = re.compile(r"(==|!=|\bnot in\b|\bin\b)\s*")
_GUARD_SCALAR = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?[\d.][\w.+-]*|\b(?:True|False|None)\b""")
# A guard on sizes (dynamo's shape guards, ``L['x'].size()[1] == 8``): its numbers are shapes, not data
_SHAPE_GUARD = re.compile(r"\.size\(\)|\.stride\(\)|\.storage_offset\(\)")


def _literal_end(line: str, at: int) -> int | None:
    """Where the literal starting at ``line[at]`` ends: a text, a number, a flag or None, or a bracketed literal taken
    whole however deep it nests (a tuple of tuples, a list of texts holding brackets). None: no literal starts there.
    An unclosed bracket runs to the line's end (the rest is the literal's)."""
    if at < len(line) and line[at] in "([{":
        depth, i = 0, at
        while i < len(line):
            c = line[i]
            if c in "'\"":  # a text inside: its brackets are not the literal's
                m = _GUARD_SCALAR.match(line, i)
                i = m.end() if m else len(line)
                continue
            if c in "([{":  # any bracket opens and any closes: a literal is balanced, and only its end is sought
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return len(line)
    m = _GUARD_SCALAR.match(line, at)
    return m.end() if m else None


def _scrub_values(line: str) -> str:
    """Each literal a value guard compares with as ``<value>``, the rest of the guard as torch wrote it."""
    out, kept, pos = [], 0, 0
    while True:
        m = _GUARD_OPERATOR.search(line, pos)
        if m is None:
            break
        end = _literal_end(line, m.end())
        if end is None:
            pos = m.end()
            continue
        out.append(f"{line[kept : m.start()]}{m.group(1)} <value>")
        kept = pos = end
    out.append(line[kept:])
    return "".join(out)


@functools.lru_cache(maxsize=512)  # the same failure texts come back at each recompile of a frame
def scrub_guard_text(text: str) -> str:
    """A guard failure without the user's source line and without the values of value guards.

    ``"scale == 0.5  # y = x * s  # f.py:9 in f"`` -> ``"scale == <value>"``; ``"cfg == (1, (2, 3))"`` -> ``"cfg ==
    <value>"``. Tensor checks (``tensor 'x' size mismatch ... expected 4, actual 8``) and guards on sizes
    (``L['x'].size()[1] == 8``) keep their sizes, dtypes and devices: those are shapes, not data.
    """
    out = []
    for line in text.splitlines():
        if "#" in line:
            line = _GUARD_SOURCE.sub("", line)
        if "tensor '" not in line and not _SHAPE_GUARD.search(line):
            line = _scrub_values(line)
        out.append(line)
    return "\n".join(out)


# How each torch release words a frame's hit of the recompile limit: (fail_type, or words in fail_reason).
# 2.10 raises RecompileLimitExceeded ("recompile_limit reached"; "cache_size_limit reached" on older names), or with
# fullgraph=True / fail_on_recompile_limit_hit FailOnRecompileLimitHit; without torch's skip-recursive knob it
# reports Unsupported "Dynamo cache limit exceeded". 2.11 on: Unsupported "Dynamo recompile limit exceeded".
RECOMPILE_LIMIT_FAIL_TYPES = frozenset({"RecompileLimitExceeded", "FailOnRecompileLimitHit", "CacheLimitExceeded"})
LIMIT_RAISED = "FailOnRecompileLimitHit"  # the one of them torch raises into the caller: nothing runs in eager
RECOMPILE_LIMIT_WORDS = (
    "recompile limit exceeded",
    "cache limit exceeded",
    "recompile_limit reached",
    "cache_size_limit reached",
)


def is_recompile_limit_hit(fail_type: str | None, fail_reason: str | None) -> bool:
    """Whether a failed compile is its frame hitting the recompile limit, in any supported release's words."""
    if fail_type in RECOMPILE_LIMIT_FAIL_TYPES:
        return True
    reason = (fail_reason or "").lower()
    return any(w in reason for w in RECOMPILE_LIMIT_WORDS)
