"""Output paths checked before the work that fills them: why one cannot be written, in one line naming its option.

A command checks each output path it was given (``--html``, ``--json``,
``--traces-file``, ...) before it runs anything, so a path it cannot write is
one line and a prompt exit, not a traceback after the whole run. Missing parent
directories are not a problem: the writers create them.
"""

from __future__ import annotations

import errno
import os
from typing import Any


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be written as a file (its missing parent directories created), in a few words; None if it can.

    Judged from the file system as it is now, without writing anything.
    """
    if not path:
        return "the path is empty"
    if path.endswith(("/", os.sep)):
        return "it names a directory"
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.lexists(path):
        return None if os.access(path, os.W_OK) else _denied(path, path)
    # the nearest ancestor that exists: it must be a directory we may create entries in
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is a file, not a directory" if os.path.exists(parent) else f"{parent} is a broken link"
    if not os.access(parent, os.W_OK | os.X_OK):
        return _denied(parent, path)
    return None


def _denied(where: str, path: str) -> str:
    """Permission denied, or a read-only file system, for writing ``path`` in or at ``where``."""
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return f"{where} is on a read-only file system"
    except OSError:
        pass
    return f"permission denied: {where} is not writable" if where != path else "permission denied"


def check_writable(path: str, option: str) -> str | None:
    """The one line (no prefix) that says ``option``'s ``path`` cannot be written, and the fix; None if it can be."""
    why = path_problem(path)
    if why is None:
        return None
    return f"cannot write {option} {path} ({why}); pass a writable path"


def write_error(path: str, option: str, exc: OSError) -> str:
    """The one line for a write that failed all the same (a full disk, a race): the reason, never a traceback."""
    why = path_problem(path) or exc.strerror or errno.errorcode.get(exc.errno or 0) or str(exc)
    return f"cannot write {option} {path} ({why}); pass a writable path"


_INSTALLED = ("site-packages", "dist-packages")


_installed_paths: dict[str, bool] = {}  # each path's answer: a compile's code and caller come back at every compile


def in_installed_package(path: str | None) -> bool:
    """Whether a code path lies in an installed package (``site-packages``, ``dist-packages``): a library's frame, not
    the user's. Judged from the path alone, so a replay of another machine's log answers as the live run did."""
    if not path:
        return False
    got = _installed_paths.get(path)
    if got is None:
        parts = path.replace("\\", "/").split("/")
        got = any(p in _INSTALLED for p in parts[:-1])
        if len(_installed_paths) >= 4096:
            _installed_paths.clear()
        _installed_paths[path] = got
    return got


def call_site_text(site: Any) -> str | None:
    """A compile's call site (``CompileRecord.call_site``: ``file`` and ``line``) as the summary writes it: ``model.py:41``;
    None with no call site."""
    if site is None or not getattr(site, "file", None):
        return None
    return f"{os.path.basename(site.file)}:{site.line if site.line is not None else '?'}"


def library_call_site(code_file: str | None, site: Any) -> str | None:
    """Where the user called a library's frame (``model.py:41``): part of the frame's key in the run summary, so two
    models compiled through one library wrapper are two frames; None for the user's own code, or with no call site."""
    return call_site_text(site) if in_installed_package(code_file) else None
