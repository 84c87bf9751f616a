"""What the assembler's records become: spans, metrics, log records, the run summary and its HTML page (and the
diff's page).

Imports nothing: a layer's modules are imported by name (``import torch_otel._sinks.x``).
"""
