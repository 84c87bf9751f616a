"""Live capture's attach table as a mechanism: its row types (points), how a table of rows is attached (attaching),
and the release policy (releases). Live capture's own rows and each feature's are made of these.

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._attach.x``).
"""
