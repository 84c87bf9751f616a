"""``torch-otel diff --html``: the diff as one self-contained page, side by side, in the run summary page's style.

As :mod:`torch_otel._sinks.html`: no outside reference (no CDN, font or image), the CSS and JavaScript are package data
(``torch_otel/_assets/summary.css``, ``diff.css``, ``catch-errors.js``, ``page-kit.js``, ``diff.js``, and each feature's
page script) inlined, and the diff's facts are embedded as JSON in a ``<script type="application/json">`` element, read with
``textContent`` only, so a name, reason or path from user code can never become markup. ``page-kit.js`` holds the
helpers both pages draw with.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from .html import _PAGE_HEAD as _HEAD
from .html import _inlined, _script_json

__all__ = ["render_diff_html"]

# {name}: the text of torch_otel/_assets/<name>. The error catcher runs first, so any later failure lands in data-errors.
_AFTER_TITLE = """</title>
<style>
{summary.css}{diff.css}</style>
</head>
<body data-errors="" data-rendered="">
<script>
{catch-errors.js}</script>
<noscript><p>This page needs JavaScript to draw the diff (it loads nothing from the network).</p></noscript>
<header id="head"></header>
<main>
<div class="grid" id="tables"></div>
</main>
<script type="application/json" id="diff">"""

_AFTER_JSON = """</script>
<script>
{page-kit.js}{features.js}{diff.js}</script>
</body>
</html>
"""


def render_diff_html(diff: Mapping[str, Any]) -> str:
    """One self-contained page of a diff (:func:`torch_otel._analysis.diff_compare.compare`'s facts)."""
    title = html.escape(f"torch-otel diff: {diff.get('base', {}).get('path', '?')} -> {diff.get('new', {}).get('path', '?')}")
    return _HEAD + title + _inlined(_AFTER_TITLE) + _script_json(diff) + _inlined(_AFTER_JSON)
