"""What the facts mean, on records and summaries: why caches missed (and the key index), recompiles and their
fixes, cross-rank divergence, and ``torch-otel diff``'s comparison and gate.

Imports nothing: a layer's modules are imported by name (``import torch_otel._analysis.x``).
"""
