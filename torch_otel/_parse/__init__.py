"""torch's records -> typed events: one handler per record kind (records.py), and the ``TORCH_TRACE`` log reader
(trace_log.py).

Imports nothing: a layer's modules are imported by name (``import torch_otel._parse.x``).
"""
