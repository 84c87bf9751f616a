"""The pipeline (pipeline.py) and its one builder (build.py), and its three uses: the bridge, live (bridge.py),
``torch-otel replay`` (replay.py) and ``torch-otel diff`` (diff_command.py); the sinks installed as packages
(installed_sinks.py).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._pipeline.x``).
"""
