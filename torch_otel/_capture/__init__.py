"""Live capture: the table of points where the bridge attaches to torch, and the hooks that queue what torch
hands them for the assembler.

Imports nothing: a layer's modules are imported by name (``import torch_otel._capture.x``).
"""
