"""Lines that fit a screen's width without losing what matters most in them: the numbers at their end."""

from __future__ import annotations

__all__ = ["cut", "cut_middle", "wrap"]


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
    """A frame as the summary names it (``MyModel.forward (train.py:12)``, ``GPT2LMHeadModel.wrapper (generic.py:1030)
    from train.py:42``) in at most ``n`` characters: its name is cut in the middle, its file:line and call site kept
    whole while they fit (they are what a user looks for, and hold the numbers); else the whole, as :func:`cut_middle`."""
    if len(text) <= n:
        return text
    at = text.find(" (")
    if at > 0 and len(text) - at <= n - 8:  # a name of at least 8 characters beside it
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
