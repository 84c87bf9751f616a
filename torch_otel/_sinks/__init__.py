"""What the assembler's records become: spans, metrics, log records, the run summary (what it collects, its text,
its merge over ranks) and its HTML page, the diff's page, and the user's sinks behind the public record.

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._sinks.x``).
"""
