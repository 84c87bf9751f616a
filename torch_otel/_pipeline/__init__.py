"""The pipelines: the one builder of sinks and their lifecycle (build.py), and what puts sources, the assembler and
sinks together for live capture (the bridge, live.py), ``torch-otel replay`` (replay.py) and ``torch-otel diff``
(diff.py).

Imports nothing: a layer's modules are imported by name (``import torch_otel._pipeline.x``).
"""
