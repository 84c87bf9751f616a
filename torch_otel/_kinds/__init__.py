"""Kinds of event added to the record's own: what torch logs of each, read once (cache lookups).

Imports nothing: a layer's modules are imported by name (``import torch_otel._kinds.x``).
"""
