"""The OpenTelemetry side: providers and exporters built from the ``OTEL_*`` settings, exporters guarded (what
they lose is counted and said once), the OTLP-JSON file exporter, span ids, the Prometheus ``/metrics`` endpoint,
and replay's per-process tracers. Knows nothing of torch.

Imports nothing: a layer's modules are imported by name (``import torch_otel._otel.x``).
"""
