"""Typed events -> finished compile records (assembler), the facts derived for them once, before any sink sees
them (derive), and the one loop that hands each to the features' live states and the sinks (fanout).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._assemble.x``).
"""
