"""The data: the typed events every source produces, the compile record every sink of the bridge reads, the
bridge's own ``Sink`` interface (record), and the public extension point, ``torch_otel.Sink`` and the record it gets
(sink_api: the one module of this package whose names are public, through ``torch_otel``).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._model.x``).
"""
