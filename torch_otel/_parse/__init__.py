"""torch's records -> typed events: one handler per record type, and the features' rows (records.py), and the
``TORCH_TRACE`` log reader (trace_log.py).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._parse.x``).
"""
