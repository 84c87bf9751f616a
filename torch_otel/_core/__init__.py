"""Foundations every layer may use: the bridge's own errors and health counts, settings, compile ids, ranks,
the import watcher that arms the bridge, paths, ports, and torch's vocabulary (recompile categories, phases, graph
breaks). Imports nothing else of the package.

Imports nothing: a layer's modules are imported by name (``import torch_otel._core.x``).
"""
