"""GPU paths: the device on the spans, and what a recorded GPU run (bench/gpu_check.py on an H100/H200) showed.

Tests that need CUDA skip without it; the others run on CPU from the committed GPU log
(``tests/data/gpu-h100``), which live capture on that GPU was checked against (docs/compatibility.md, On a GPU).
"""

from __future__ import annotations

import pytest
import torch

CUDA = torch.cuda.is_available()
DEVICE_ATTRS = ("torch.cuda.device.name", "torch.cuda.device.capability", "torch.cuda.device.index")


@pytest.mark.skipif(CUDA, reason="on a machine with a GPU, dynamo itself initialises CUDA at its first compile")
def test_a_process_that_never_touched_cuda_gets_no_device_attributes_and_cuda_stays_uninitialised(cap):
    """On a machine without a GPU (this build of torch has CUDA compiled in), the bridge names no device and never
    initialises CUDA to find one. (Where a GPU is present, dynamo initialises CUDA at its first compile, as it saves
    the CUDA RNG state, so later compiles name the current device whatever their code runs on.)"""
    assert not torch.cuda.is_initialized()
    torch.compile(lambda x: x.sin() + 1, backend="eager")(torch.randn(4))
    (root,) = cap.roots()
    assert not set(DEVICE_ATTRS) & set(root.attributes)
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_compile_on_a_gpu_names_its_device_on_the_root_span(cap):
    x = torch.randn(64, device="cuda")
    torch.compile(lambda t: t.sin() * 2, backend="inductor")(x)
    (root,) = cap.roots()
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    assert root.attributes["torch.cuda.device.name"] == torch.cuda.get_device_name(index)
    assert root.attributes["torch.cuda.device.capability"] == f"{major}.{minor}"
    assert root.attributes["torch.cuda.device.index"] == index
