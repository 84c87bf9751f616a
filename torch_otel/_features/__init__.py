"""The features: each a plugin its pipeline owns, declared in a package of this folder (its events, its hooks, its
live state, its derived facts, its views; the seam: feature.py and views.py), and listed by one row of registry.py.

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._features.x``).
"""
