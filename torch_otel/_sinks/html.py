"""The run summary as one self-contained HTML page: where did this run's compile time go.

:func:`render_html` takes :meth:`RunSummary.to_dict <torch_otel._sinks.summary.RunSummary.to_dict>`
and returns a page with no outside references at all (no CDN, fonts, images or scripts): inline
CSS and vanilla JS draw an icicle chart of the summary's tree (the run, its frames, their compiles,
their phases) and its tables. The page must open from a file on a machine with no network.
The CSS and JS are package data, ``torch_otel/_assets/`` (shipped in the wheel and the sdist), read
once per process and written into the page's ``<style>`` and ``<script>`` elements.

The summary is embedded as JSON in a ``<script type="application/json">`` element and the page is
built from it with ``textContent`` only, so names, reasons and file paths from user code or logs
can never become markup. Every ``<``, ``>`` and ``&`` in that JSON is written as a ``\\u00XX``
escape, which JSON.parse reads back unchanged and the HTML parser cannot end the element on.
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

from .._features.feature import Feature
from .._features.registry import features_or_default

__all__ = ["render_html"]

_PAGE_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>"""

# The page between its title and the summary's JSON, and after the JSON: {name} is the text of
# torch_otel/_assets/<name>, inlined (each file ends with a newline). No other braces in this markup.
# The error catcher runs first, so a failure anywhere later still lands in data-errors (the tests read it).
_AFTER_TITLE = """</title>
<style>
{summary.css}</style>
</head>
<body data-errors="" data-rendered="">
<script>
{catch-errors.js}</script>
<noscript><p>This page needs JavaScript to draw the run summary (it loads nothing from the network).</p></noscript>
<header id="head"></header>
<main>
<section>
<div class="toolbar">
<h2 style="margin:0">Where the compile time went</h2>
<button id="reset" type="button" disabled>reset zoom</button>
<span class="crumbs" id="crumbs"></span>
</div>
<div class="toolbar legend" id="legend"></div>
<div id="chart"></div>
<p class="muted" style="font-size:12px;margin:4px 0 0">Width is time. A box's children are laid out left to right
inside it; the gap that remains is its self time. Hover for details, click to zoom, click the top bar or press Esc to zoom out.</p>
</section>
<div class="grid" id="tables"></div>
</main>
<div id="tip"></div>
<script type="application/json" id="summary">"""

_AFTER_JSON = """</script>
<script>
{page-kit.js}{features.js}{summary.js}</script>
</body>
</html>
"""

_ASSETS = "_assets"
# What would end each asset's element early: the HTML parser reads a style or script element up to it.
_CLOSING_TAG = {".css": "</style", ".js": "</script"}
_PLACEHOLDER = re.compile(r"\{([\w.-]+)\}")


@functools.cache
def _asset(name: str) -> str:
    """The text of ``torch_otel/_assets/<name>`` (package data), read once per process."""
    text = resources.files(__name__.split(".")[0]).joinpath(_ASSETS).joinpath(name).read_text(encoding="utf-8")
    closing = _CLOSING_TAG[name[name.rindex(".") :]]
    if closing in text.lower():
        raise ValueError(f"torch_otel/{_ASSETS}/{name} holds {closing!r}: inlined, it would end its element early")
    return text


@functools.cache
def _script(package: str, name: str) -> str:
    """The text of a feature's page script (package data of its package), read once per process."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    if "</script" in text.lower():
        raise ValueError(f"{package}/{name} holds '</script': inlined, it would end its element early")
    return text


def _feature_scripts(features: tuple[Feature, ...] | None = None) -> str:
    """Each feature's part of the pages (its ``PageView``), in the features' order: after the kit, before the page."""
    return "".join(_script(f.page.package, f.page.script) for f in features_or_default(features) if f.page is not None)


def _inlined(template: str) -> str:
    """``template`` with each ``{name}`` replaced by that asset's text (``{features.js}``: the features' scripts)."""
    return _PLACEHOLDER.sub(lambda m: _feature_scripts() if m.group(1) == "features.js" else _asset(m.group(1)), template)


def _plain(value: Any) -> Any:
    """``value`` with NaN and infinities as null: JSON.parse rejects them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _script_json(summary: Mapping[str, Any]) -> str:
    """The summary as JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left literal."""
    text = json.dumps(_plain(summary), default=str, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _title(summary: Mapping[str, Any]) -> str:
    source = summary.get("source") or "unknown"
    compiles = summary.get("compiles") or 0
    return html.escape(f"torch.compile run summary ({source}, {compiles} compile{'' if compiles == 1 else 's'})")


def render_html(summary: Mapping[str, Any]) -> str:
    """One self-contained HTML page (no network) showing where the run's compile time went.

    ``summary`` is :meth:`RunSummary.to_dict`; missing fields are shown as empty.
    """
    return _PAGE_HEAD + _title(summary) + _inlined(_AFTER_TITLE) + _script_json(summary) + _inlined(_AFTER_JSON)
