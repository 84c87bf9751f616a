"""What the facts mean, on records and summaries: the guard torch reported and the hints drawn from it
(recompile_guards, recompile_hints), the frames that recompile most (recompiling_frames), the frames left in eager
(eager), cross-rank divergence (divergence), and ``torch-otel diff``'s comparison, gate and text (diff_compare,
diff_gate, diff_text).

Private: not an API, and changed in any release (the public names are ``torch_otel``'s ``__all__``).

Imports nothing: a layer's modules are imported by name (``import torch_otel._analysis.x``).
"""
