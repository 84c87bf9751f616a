"""Lines that fit a screen's width without losing what matters most in them: the numbers at their end."""

from __future__ import annotations

import re

__all__ = ["cut", "cut_middle", "shorten_reason", "wrap"]


def cut(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters: its end replaced by "…" where it is longer."""
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def cut_middle(text: str, n: int, keep_end: int = 36) -> str:
    """``text`` in at most ``n`` characters, its middle replaced by "…" where it is longer: the end (torch's
    "expected 16, actual 24", a change's number) is kept whole, up to ``keep_end`` characters of it."""
    if len(text) <= n:
        return text
    end = min(keep_end, max(0, n // 2))
    head = max(0, n - 1 - end)
    return text[:head] + "…" + (text[len(text) - end :] if end else "")


def cut_where(text: str, n: int) -> str:
    """A frame as the summary names it (``MyModel.forward (train.py:12)``, ``GPT2LMHeadModel.forward
    (modeling_gpt2.py:647) from train.py:42``) in at most ``n`` characters. What gives way first is a library's file
    name where the user's call site follows it (its ``:line`` kept; where fewer than 8 of its characters would stay,
    the whole place goes), then the frame's name, cut in the middle; the call site, the user's own line, stays whole
    while it fits; else the whole, as :func:`cut_middle`."""
    if len(text) <= n:
        return text
    at = text.find(" (")
    close = text.find(")", at)
    if at <= 0 or close < 0:
        return cut_middle(text, n, 24)
    name, inner, tail = text[:at], text[at + 2 : close], text[close + 1 :]
    if tail:  # " from train.py:42": the library's file gives way to the user's line, down to 8 characters
        colon = inner.rfind(":")
        file, line = (inner[:colon], inner[colon:]) if colon > 0 else (inner, "")
        room = len(file) - (len(text) - n)
        if room >= 8:
            return f"{name} ({cut_middle(file, room, room // 2)}{line}){tail}"
        text = name + tail  # no room for the library's place: the name and the user's line
        if len(text) <= n:
            return text
        at = text.find(" from ")
    if len(text) - at <= n - 8:  # a name of at least 8 characters beside it
        return cut_middle(text[:at], n - (len(text) - at), (n - (len(text) - at)) // 2) + text[at:]
    return cut_middle(text, n, 24)


def wrap(text: str, n: int, lines: int, indent: str = "") -> list[str]:
    """``text`` as at most ``lines`` lines of at most ``n`` characters, broken at spaces: the first keeps ``text``'s
    own leading spaces, the later ones start with ``indent``; where it does not fit, the last line ends in "…"."""
    lead = text[: len(text) - len(text.lstrip(" "))]
    words = text[len(lead) :].split(" ")
    out: list[str] = []
    cur = ""
    for i, w in enumerate(words):
        prefix = indent if out else lead
        room = n - len(prefix)
        if not cur or len(cur) + 1 + len(w) <= room:
            cur = f"{cur} {w}" if cur else w
            continue
        if len(out) + 1 == lines:  # the last line: what is left does not fit
            return [*out, prefix + cut(" ".join([cur, *words[i:]]), room)]
        out.append(prefix + cut(cur, room))
        cur = w
    if cur:
        prefix = indent if out else lead
        out.append(prefix + cut(cur, n - len(prefix)))
    return out


# -- a recompile reason on a screen: torch's words for what failed kept, the module path shortened whole -------------

# torch's sources for a module's members, as the user names them: ``._modules['layers']._modules['1']`` is ``.layers[1]``
_MEMBER = re.compile(r"\._(?:modules|parameters|buffers)\['([^'\]]*)'\]")
# a source path: a name, then attributes and subscripts (``args[0].model.layers[1].self_attn.attention_dropout``)
_PATH = re.compile(r"[A-Za-z_]\w*(?:\[[^\]\s]*\]|\.[A-Za-z_]\w*)+")
_PART = re.compile(r"\.?[A-Za-z_]\w*|\[[^\]\s]*\]")
# torch's words for what a guard found (guards.cpp's TensorGuards, its global-state and value guards)
_MEANING = re.compile(
    r"(?:size|stride|dtype|rank|requires_grad|device|dispatch key set) mismatch(?: at index \d+)?"
    r"|GLOBAL_STATE changed|\s(?:==|!=|is not|is|not in|in)\s|___check_\w+\([^,()]*|hasattr|isinstance"
)
_ADVICE = re.compile(r"\.\s+(?=[A-Z])")  # a sentence after the facts: torch's advice
_KEYSETS = re.compile(r"expected DispatchKeySet\(([^)]*)\), actual DispatchKeySet\(([^)]*)\)")


def _member(m: re.Match[str]) -> str:
    name = m.group(1)
    return f"[{name}]" if name.isdigit() else f".{name}" if re.fullmatch(r"[A-Za-z_]\w*", name) else m.group(0)


def _keysets(m: re.Match[str]) -> str:
    """The two dispatch key sets as what one has that the other lacks (inference_mode's tensors lack
    ``ADInplaceOrView``; no_grad's have it)."""
    want = [k.strip() for k in m.group(1).split(",") if k.strip()]
    got = [k.strip() for k in m.group(2).split(",") if k.strip()]
    lacks, adds = [k for k in want if k not in got], [k for k in got if k not in want]
    words = ([f"actual lacks {', '.join(lacks)}"] if lacks else []) + ([f"actual adds {', '.join(adds)}"] if adds else [])
    return "; ".join(words) or m.group(0)


def _parts(path: str) -> list[str]:
    """A path's parts, its root with its subscripts as one (``args[0]``, ``L['self']``)."""
    parts = _PART.findall(path)
    while len(parts) > 1 and parts[1].startswith("["):
        parts[0:2] = [parts[0] + parts[1]]
    return parts


def _short_path(path: str, room: int, keep: int) -> str:
    """A path in about ``room`` characters: its root, "…", and as many of its last parts as fit (at least ``keep``),
    each whole."""
    parts = _parts(path)
    if len(path) <= room or len(parts) <= keep + 1:
        return path
    tail = parts[len(parts) - keep :]
    for part in reversed(parts[1 : len(parts) - keep]):
        if len(parts[0]) + 1 + len(part) + sum(map(len, tail)) > room:
            break
        tail.insert(0, part)
    if len(tail) == len(parts) - 1:
        return path
    return parts[0] + "…" + "".join(tail).lstrip(".")


def _shorten_paths(text: str, n: int, keep: int) -> str:
    """Each path of ``text``, the longest first, loses whole parts from its middle until ``text`` fits in ``n``."""
    done: set[str] = set()
    while len(text) > n:
        paths = [m for m in _PATH.finditer(text) if m.group(0) not in done]
        if not paths:
            return text
        m = max(paths, key=lambda m: m.end() - m.start())
        short = _short_path(m.group(0), max(1, len(m.group(0)) - (len(text) - n)), keep)
        done.add(short)
        text = text[: m.start()] + short + text[m.end() :]
    return text


def shorten_reason(text: str, n: int) -> str:
    """A recompile reason in at most ``n`` characters that keeps what it means: torch's words for what the guard found
    ("dispatch key set mismatch", "size mismatch at index 0", "== <value>") and the end of the path it names (the
    attribute that changed), each whole. Where it is longer: module members are written as the user writes them
    (``.layers[1]`` for ``._modules['layers']._modules['1']``), two dispatch key sets as what one lacks, a path loses
    whole parts from its middle (its last two kept), torch's advice after the facts goes ("Guard failed on a
    parameter, consider ..."), what follows torch's words loses its start (its end, "expected 8, actual 16", kept),
    and only then a path keeps no more than its root and its last part. The whole reason is in the JSON."""
    if len(text) <= n:
        return text
    base = _KEYSETS.sub(_keysets, _MEMBER.sub(_member, text))
    found = None
    for keep in (2, 1):
        text = _shorten_paths(base, n, keep)
        if len(text) <= n:
            return text
        m = _MEANING.search(text)
        if m is not None and m.end() < n:  # torch's words whole; of what follows them, its end ("actual 16")
            head, rest = text[: m.end()], text[m.end() :]
            more = _ADVICE.search(rest)  # torch's advice after the facts ("Guard failed on a parameter, consider ...")
            if more is not None:
                rest = rest[: more.start() + 1]
                if len(head) + len(rest) + 1 <= n:
                    return head + rest + "…"
            room = n - len(head) - 1 - (1 if more is not None else 0)
            found = head + "…" + (rest[len(rest) - room :] if room > 0 else "") + ("…" if more is not None else "")
            if room >= min(len(rest), 20):
                return found
    return found or cut_middle(text, n)
