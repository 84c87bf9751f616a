"""Live capture: its own rows of the attach table (attach_table), the hooks that queue what torch hands them
(live_capture), and the worker that turns the queue into events for the assembler (processing).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._capture.x``).
"""
