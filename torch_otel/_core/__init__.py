"""Foundations every layer may use: the bridge's own errors and health counts, settings, compile ids, ranks,
the watch for torch._dynamo's import that arms the bridge, paths, ports, and torch's vocabulary (recompile
categories, phases, graph breaks, frame names). Imports nothing else of the package.

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._core.x``).
"""
