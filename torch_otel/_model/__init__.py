"""The data: the typed events every source produces, the compile record every sink reads, and the ``Sink``
interface.

Imports nothing: a layer's modules are imported by name (``import torch_otel._model.x``).
"""
