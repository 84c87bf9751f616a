"""The pipelines: what puts sources, the assembler and sinks together for live capture (the bridge),
``torch-otel replay`` and ``torch-otel diff``.

Imports nothing: a layer's modules are imported by name (``import torch_otel._pipeline.x``).
"""
