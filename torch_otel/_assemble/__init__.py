"""Typed events -> finished compile records, and the facts derived for them once, before any sink sees them.

Imports nothing: a layer's modules are imported by name (``import torch_otel._assemble.x``).
"""
