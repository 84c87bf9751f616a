"""One small inductor compile, run under ``TORCH_COMPILE_DEBUG=1`` and ``TORCH_TRACE`` by the tests (bridge via ``torch_otel.auto``)."""

import torch

import torch_otel.auto  # noqa: F401

torch.compile(lambda x: torch.relu(x) * 2)(torch.randn(8))
print("done")
