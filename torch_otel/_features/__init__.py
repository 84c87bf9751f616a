"""Kinds of event added to the record's own, each declared in one module: its event, how torch's records become it,
how it joins its compile, the facts derived for it, and what each sink shows of it (kind.py; the table: registry.py).

Imports nothing: a layer's modules are imported by name (``import torch_otel._features.x``).
"""
