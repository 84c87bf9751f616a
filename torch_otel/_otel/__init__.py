"""The OpenTelemetry side: providers and exporters built from the ``OTEL_*`` settings, exporters guarded (what
they lose is counted and said once), the OTLP-JSON file exporter, span ids, the Prometheus ``/metrics`` endpoint,
replay's per-process tracers, and what a run with nothing configured says. Knows nothing of torch.

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._otel.x``).
"""
