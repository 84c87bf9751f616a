"""Live capture on a CUDA GPU, checked against torch's own record of the same processes (docs/compatibility.md)."""
